package store

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// TestEntryCRCLayout holds the on-disk format: the CRC put computes with
// one call over its contiguous copy is the CRC of bytes 0..12 and 16..40 of
// the entry, as consume logs written before it hold.
func TestEntryCRCLayout(t *testing.T) {
	e := entry{offset: 1<<40 + 12345, size: 987, timestamp: 1_700_000_000_123, deliverAt: 1_700_000_005_000, bloom: 0xdeadbeefcafef00d}
	var b [entryWidth]byte
	e.put(b[:])
	want := crc32.Update(0, castagnoli, b[0:12])
	want = crc32.Update(want, castagnoli, b[16:40])
	if got := binary.BigEndian.Uint32(b[12:]); got != want {
		t.Fatalf("crc %#x, want %#x over bytes 0..12 and 16..40", got, want)
	}
	got, ok := decodeEntry(b[:])
	if !ok || got != e {
		t.Fatalf("decoded %+v (crc ok %v), want %+v", got, ok, e)
	}
	for i := range b {
		c := b
		c[i] ^= 0x10
		if _, ok := decodeEntry(c[:]); ok {
			t.Fatalf("a flipped bit in byte %d passed the CRC", i)
		}
	}
}

func BenchmarkEntryPut(b *testing.B) {
	var buf [entryWidth]byte
	e := entry{offset: 4096, size: 300, timestamp: 1_700_000_000_000}
	for i := 0; b.Loop(); i++ {
		e.offset += int64(i)
		e.put(buf[:])
	}
}
