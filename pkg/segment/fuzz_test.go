package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func FuzzParseRecord(f *testing.F) {
	rec := make([]byte, HeaderSize+5)
	copy(rec[HeaderSize:], "hello")
	putHeader(rec, 1, rec[HeaderSize:])
	f.Add(rec)
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, payload, size, err := ParseRecord(b)
		if err != nil {
			return
		}
		if size > len(b) || size != HeaderSize+len(payload) || kind == 0 {
			t.Fatalf("size %d payload %d kind %d", size, len(payload), kind)
		}
		again := make([]byte, size)
		copy(again[HeaderSize:], payload)
		putHeader(again, kind, payload)
		if !bytes.Equal(again, b[:size]) {
			t.Fatal("a valid record does not re-encode to its bytes")
		}
	})
}

// FuzzReader reads arbitrary bytes as a segment: the reader never panics,
// hands out only records inside the data, in increasing order, and stops
// with ok false or an error.
func FuzzReader(f *testing.F) {
	rec := make([]byte, HeaderSize+5)
	copy(rec[HeaderSize:], "hello")
	putHeader(rec, 1, rec[HeaderSize:])
	f.Add(append(append([]byte(nil), rec...), rec...))
	f.Add([]byte{0x51, 0x4c, 1, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName(0)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := OpenLog(dir, LogOptions{SegmentSize: 4096, NoPreallocate: true, MaxRecordSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		limit := int64(len(data))
		r := l.NewReader(0)
		prev := int64(-1)
		for i := 0; i < 1000; i++ {
			off, _, payload, ok, err := r.Next(limit)
			if err != nil || !ok {
				return
			}
			if off <= prev || off+RecordSize(len(payload)) > limit {
				t.Fatalf("record at %d of %d bytes outside the data (%d)", off, len(payload), limit)
			}
			prev = off
		}
	})
}
