package segment

import (
	"bytes"
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
