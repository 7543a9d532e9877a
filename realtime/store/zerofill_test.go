package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// Under FlushSync the store keeps the message log zero-filled ahead of its
// end while appends go on, and every appended message survives a reopen.
func TestZeroFillAheadOfAppends(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.ZeroFillAhead = 4 << 20
	s := openStore(t, dir, opts)
	want := map[string][]byte{}
	add := func(id string, i int) {
		m := encode(t, "z", id, bytes.Repeat([]byte{byte(i)}, 64<<10))
		appendAll(t, s, m)
		want[id] = m
	}
	for i := range 20 {
		add(fmt.Sprint("m", i), i)
	}
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := s.Stats().ZeroFilled; n < 4<<20-64<<10 {
			return fmt.Errorf("zero-filled %d bytes, want about 4 MiB", n)
		}
		return nil
	})
	if s.Stats().ZeroFilled == 0 {
		t.Skip("no zero fill on this file system")
	}
	for i := range 20 {
		add(fmt.Sprint("n", i), i)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, opts)
	defer s.Close()
	pullsBack(t, s, "z", "g", want)
}

// The filler fills from the end, at most zeroFillPerRun a run, not twice,
// and starts over from the end when the log was cut back.
func TestZeroFiller(t *testing.T) {
	opts := testOptions()
	opts.ZeroFillAhead = -1 // the test runs the filler
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	appendAll(t, s, encode(t, "s", "a", []byte("x")))
	end := s.msgLog.End()
	page := func(off int64) int64 { return off / 4096 * 4096 } // ZeroFill works in 4 KiB
	now := time.Now()
	z := zeroFiller{ahead: 3 << 20}
	n, err := z.run(s.msgLog, now)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no zero fill here: %v", err)
	}
	if want := page(end + zeroFillPerRun); err != nil || z.done != want || n != want-end {
		t.Fatalf("first run: filled %d to %d, %v; want to %d", n, z.done, err, want)
	}
	first := z.done
	if n, err := z.run(s.msgLog, now); err != nil || z.done != page(end+3<<20) || n != z.done-first {
		t.Fatalf("second run: filled %d to %d, %v; want to %d", n, z.done, err, page(end+3<<20))
	}
	if n, _ := z.run(s.msgLog, now); n != 0 {
		t.Fatalf("a run with nothing new ahead filled %d bytes", n)
	}
	z.lastEnd = end + 1<<20 // as if the log had been cut back since
	if z.run(s.msgLog, now); z.done != page(end+zeroFillPerRun) {
		t.Fatalf("after a cut: filled to %d, want %d (from the end again)", z.done, page(end+zeroFillPerRun))
	}
}

// A log that grows faster than zeroFillMaxRate is not filled; once it slows
// down, filling resumes from its end.
func TestZeroFillerSkipsFastLogs(t *testing.T) {
	opts := testOptions()
	opts.ZeroFillAhead = -1 // the test runs the filler
	opts.SegmentSize = 64 << 20
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	now := time.Now()
	z := zeroFiller{ahead: 1 << 20}
	if _, err := z.run(s.msgLog, now); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no zero fill here: %v", err)
	}
	// 40 MiB in the next second: faster than zeroFillMaxRate.
	for i := range 40 {
		appendAll(t, s, encode(t, "s", fmt.Sprint("m", i), make([]byte, 1<<20-512)))
	}
	now = now.Add(zeroFillRateWindow)
	if n, err := z.run(s.msgLog, now); err != nil || n != 0 {
		t.Fatalf("a run after 40 MiB in a second filled %d bytes, %v; want none", n, err)
	}
	// A quiet second: filling resumes at the end.
	now = now.Add(zeroFillRateWindow)
	end := s.msgLog.End()
	if n, err := z.run(s.msgLog, now); err != nil || n == 0 || z.done < end {
		t.Fatalf("after a quiet second: filled %d bytes to %d, %v; want from the end %d", n, z.done, err, end)
	}
	// 2 MiB in one 20 ms run after the quiet second (100 MB/s, though only
	// 2 MiB over the second): no fill for the next second.
	now = now.Add(zeroFillInterval)
	if _, err := z.run(s.msgLog, now); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		appendAll(t, s, encode(t, "s", fmt.Sprint("b", i), make([]byte, 1<<20-512)))
	}
	now = now.Add(zeroFillInterval)
	if n, err := z.run(s.msgLog, now); err != nil || n != 0 {
		t.Fatalf("a run after 2 MiB in 20 ms filled %d bytes, %v; want none", n, err)
	}
	now = now.Add(zeroFillRateWindow / 2)
	if n, err := z.run(s.msgLog, now); err != nil || n != 0 {
		t.Fatalf("a run half a second after a fast one filled %d bytes, %v; want none", n, err)
	}
	now = now.Add(zeroFillRateWindow)
	if n, err := z.run(s.msgLog, now); err != nil || n == 0 {
		t.Fatalf("a run a second after the fast one filled %d bytes, %v; want some", n, err)
	}
}
