package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Record header layout, drawn in doc.go.
const (
	// HeaderSize is the size of a record header.
	HeaderSize = 12
	// Magic starts every record.
	Magic uint16 = 0x514C
	// Version is the record format version.
	Version uint8 = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RecordSize returns the bytes a record with an n-byte payload occupies.
func RecordSize(n int) int64 { return int64(HeaderSize + n) }

// putHeader writes the header of a record whose payload is payload into
// dst[:HeaderSize].
func putHeader(dst []byte, kind uint8, payload ...[]byte) {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	putHeaderFields(dst, kind, n)
	crc := crc32.Update(0, castagnoli, dst[:8])
	for _, p := range payload {
		crc = crc32.Update(crc, castagnoli, p)
	}
	binary.BigEndian.PutUint32(dst[8:], crc)
}

// putHeaderFields writes a header's fields before its CRC into dst[:8].
func putHeaderFields(dst []byte, kind uint8, n int) {
	binary.BigEndian.PutUint16(dst[0:], Magic)
	dst[2] = Version
	dst[3] = kind
	binary.BigEndian.PutUint32(dst[4:], uint32(n))
}

// isZeroHeader reports whether h (a header's bytes) is all zero: no record
// was written there.
func isZeroHeader(h []byte) bool {
	for _, c := range h[:HeaderSize] {
		if c != 0 {
			return false
		}
	}
	return true
}

// headerLen checks a header's fixed fields and returns its payload length.
func headerLen(h []byte) (int, error) {
	if binary.BigEndian.Uint16(h[0:]) != Magic {
		return 0, fmt.Errorf("%w: bad magic %#04x", ErrCorrupt, binary.BigEndian.Uint16(h[0:]))
	}
	if h[2] != Version {
		return 0, fmt.Errorf("%w: unknown record version %d", ErrCorrupt, h[2])
	}
	if h[3] == 0 {
		return 0, fmt.Errorf("%w: record kind 0", ErrCorrupt)
	}
	return int(binary.BigEndian.Uint32(h[4:])), nil
}

// ParseRecord validates the record at the start of b and returns its kind,
// its payload (aliasing b) and its total size. It returns an error wrapping
// ErrCorrupt when the header or CRC is wrong and ErrNoRecord when b is too
// short or starts with a zero header.
func ParseRecord(b []byte) (kind uint8, payload []byte, size int, err error) {
	if len(b) < HeaderSize || isZeroHeader(b) {
		return 0, nil, 0, ErrNoRecord
	}
	n, err := headerLen(b)
	if err != nil {
		return 0, nil, 0, err
	}
	if HeaderSize+n > len(b) {
		return 0, nil, 0, fmt.Errorf("%w: record of %d bytes, %d available", ErrCorrupt, HeaderSize+n, len(b))
	}
	payload = b[HeaderSize : HeaderSize+n]
	crc := crc32.Update(0, castagnoli, b[:8])
	crc = crc32.Update(crc, castagnoli, payload)
	if crc != binary.BigEndian.Uint32(b[8:]) {
		return 0, nil, 0, fmt.Errorf("%w: record crc mismatch", ErrCorrupt)
	}
	return b[3], payload, HeaderSize + n, nil
}
