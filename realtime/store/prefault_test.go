package store

import (
	"fmt"
	"testing"
	"time"
)

// The prefaulter readies the message log ahead of the writer under
// FlushAsync: at least 4 MiB past the end, twice as far as the last
// interval's appends went, never past the segment, and not twice.
func TestPrefaulter(t *testing.T) {
	opts := testOptions()
	opts.Flush = FlushAsync
	opts.FlushInterval = time.Hour // flushLoop stays idle: the test runs the prefaulter
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	appendAll(t, s, encode(t, "s", "a", []byte("x")))
	end := s.msgLog.End()
	if !s.msgLog.Mapped(end - 1) {
		t.Skip("the message log is not written through a mapping here")
	}
	var p prefaulter
	p.lastEnd = end
	p.run(s.msgLog)
	if p.done != end+4<<20 {
		t.Fatalf("readied up to %d, want %d (4 MiB ahead)", p.done, end+4<<20)
	}
	for i := range 3 {
		appendAll(t, s, encode(t, "s", fmt.Sprint("b", i), make([]byte, 1<<20)))
	}
	end2 := s.msgLog.End()
	p.run(s.msgLog)
	want := min(end2+2*(end2-end), opts.SegmentSize)
	if p.done != want {
		t.Fatalf("readied up to %d, want %d (twice the last interval, within the segment)", p.done, want)
	}
	p.run(s.msgLog)
	if p.done != want {
		t.Fatalf("an idle interval moved the readied end to %d", p.done)
	}
}
