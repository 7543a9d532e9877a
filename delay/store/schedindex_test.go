package store

import (
	"testing"
	"time"
)

// The id index is searched whole by a cancel by id: at 10 M messages over
// 720 hours one search takes milliseconds (run with -bench IDLocs).
func BenchmarkIDLocs10M(b *testing.B) {
	x := newSchedIndex()
	const hours, perHour = 720, 10_000_000 / 720
	for h := int64(0); h < hours; h++ {
		for i := int64(0); i < perHour; i++ {
			x.addLocked(indexed{loc: packLoc(500_000+h, i*100), id: uint64(h*perHour+i) * 0x9E3779B97F4A7C15})
		}
	}
	want := uint64(12345)
	want *= 0x9E3779B97F4A7C15
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if locs := x.idLocs(want); len(locs) == 0 {
			b.Fatal("not found")
		}
	}
}

// A fingerprint match is only a candidate: the names are checked on the
// record, and the location round-trips through the packing.
func TestSchedIndex_Packing(t *testing.T) {
	x := newSchedIndex()
	h, off := hourOf(epoch.Add(48*time.Hour).UnixMilli()), int64(maxScheduleFile-100)
	id := uint64(0xABCDEF0123456789)
	x.addLocked(indexed{loc: packLoc(h, off), id: id})
	locs := x.idLocs(id)
	if len(locs) != 1 {
		t.Fatalf("locs %v", locs)
	}
	if gh, goff := unpackLoc(locs[0]); gh != h || goff != off {
		t.Fatalf("unpacked %d@%d, want %d@%d", gh, goff, h, off)
	}
	if got := x.idLocs(id ^ 1<<63); len(got) != 0 {
		t.Fatalf("another fingerprint matched: %v", got)
	}
	x.dropHours(map[int64]bool{h: true})
	if got := x.idLocs(id); len(got) != 0 {
		t.Fatalf("dropped hour still indexed: %v", got)
	}
}
