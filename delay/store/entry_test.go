package store

import (
	"testing"
	"unsafe"
)

func TestEntry_RoundTrips(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 12 {
		t.Fatalf("entry is %d bytes, want 12", got)
	}
	for _, c := range []struct{ hour, offset int64 }{
		{0, 0}, {494_000, 123}, {-1, 1<<32 + 5}, {maxEntryHour, maxScheduleFile - 1}, {minEntryHour, 1 << 39},
		{hourOf(1_900_000_000_000), 0xff_ffff_fffe},
	} {
		e := newEntry(c.hour, c.offset, 77)
		if e.hour() != c.hour || e.offset() != c.offset || e.size != 77 {
			t.Errorf("entry(%d, %d) = hour %d offset %d size %d", c.hour, c.offset, e.hour(), e.offset(), e.size)
		}
	}
	if entryFits(0, maxScheduleFile-10, 11) || entryFits(maxEntryHour+1, 0, 1) || !entryFits(maxEntryHour, maxScheduleFile-10, 10) {
		t.Fatal("entryFits is wrong at the edges")
	}
}
