package segment

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

const segSuffix = ".seg"

// FileName returns the name of the segment file whose base is base: the
// base in 20 decimal digits, zero-padded, and ".seg". (Without fmt: a
// consume log's reads name their file each time, one per pull.)
func FileName(base int64) string {
	if base < 0 {
		return fmt.Sprintf("%020d%s", base, segSuffix)
	}
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], base, 10)
	var b [20 + len(segSuffix)]byte
	n := copy(b[20-len(d):], d)
	for i := range 20 - n {
		b[i] = '0'
	}
	copy(b[20:], segSuffix)
	return string(b[:])
}

// ParseFileName returns the base of a segment file name.
func ParseFileName(name string) (int64, bool) {
	if len(name) != 20+len(segSuffix) || !strings.HasSuffix(name, segSuffix) {
		return 0, false
	}
	v, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// listBases returns the sorted bases of the segment files in entries.
func listBases(entries []fs.DirEntry) []int64 {
	var bases []int64
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if b, ok := ParseFileName(e.Name()); ok {
			bases = append(bases, b)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases
}
