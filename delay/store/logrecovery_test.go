package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/segment"
)

// unreplayedLog leaves in dir the image of a store that crashed after the
// "b" messages were acknowledged and before a checkpoint covered them:
// their records, spanning several 1 MiB segments, are replayed again at
// the next Open. It returns the offset where the b records start.
func unreplayedLog(t *testing.T, dir string, clk *clock.Fake) int64 {
	t.Helper()
	h := newHarness(t, t.TempDir(), Options{SegmentSize: 1 << 20}, clk)
	h.appendDue("a", 20, epoch.Add(time.Minute), time.Second)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	old := mustRead(t, filepath.Join(h.dir, checkpointFile))
	start := h.store.Stats().WALWritten
	body := make([]byte, 50<<10)
	for i, id := range ids("b", 80) {
		m, err := encodeBody(id, epoch.Add(2*time.Minute+time.Duration(i)*time.Second), body)
		if err != nil {
			t.Fatal(err)
		}
		h.append(m)
	}
	// A copy of the running store's files (a close would checkpoint and
	// trim the log), with the checkpoint from before the b messages.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(h.dir)); err != nil {
		t.Fatal(err)
	}
	h.close()
	mustWrite(t, filepath.Join(dir, checkpointFile), old)
	return start
}

// Damage in the middle of the message log (valid records follow it) is
// never taken for a torn tail: Open refuses, naming the offset, rather than
// drop acknowledged messages.
func TestRecovery_BadCRCInTheMiddleRefuses(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	start := unreplayedLog(t, dir, clk)
	bases := logBases(t, dir)
	if len(bases) < 3 {
		t.Fatalf("segments %v: want several", bases)
	}
	i := 0
	for i+1 < len(bases) && bases[i+1] <= start {
		i++
	}
	path := filepath.Join(dir, logDir, segment.FileName(bases[i]))
	appendBytes(t, path, start-bases[i]+40, []byte{0xde, 0xad}) // inside the first b record
	_, err := Open(dir, Options{SegmentSize: 1 << 20}, clk, nil)
	t.Log(err)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a log damaged in the middle: %v", err)
	}
}

// A bad CRC in the last record is a torn tail: cut, and the store opens
// with everything before it.
func TestRecovery_BadCRCInTheLastRecordIsCut(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("a", 30, epoch.Add(time.Minute), time.Second)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	old := mustRead(t, filepath.Join(dir, checkpointFile))
	before := h.store.Stats().WALWritten
	h.appendDue("last", 1, epoch.Add(time.Minute), 0)
	h.close()
	mustWrite(t, filepath.Join(dir, checkpointFile), old)
	path, base := lastSegment(t, dir)
	appendBytes(t, path, before-base+segment.HeaderSize+appendTimeSize+30, []byte{0xff})
	h.open()
	if got := h.store.Stats().WALWritten; got != before {
		t.Fatalf("log ends at %d after the cut, want %d", got, before)
	}
	clk.Advance(time.Hour)
	h.waitCount(30)
	h.settle()
	h.expectOnce("a", 30)
	if h.times("last-0") != 0 {
		t.Fatal("the damaged record was delivered")
	}
}

// A missing segment, in the middle or the one holding the replay
// position, makes Open refuse instead of reading the gap as the end of a
// segment.
func TestRecovery_MissingSegmentRefuses(t *testing.T) {
	for _, which := range []string{"middle", "first"} {
		t.Run(which, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			dir := t.TempDir()
			start := unreplayedLog(t, dir, clk)
			bases := logBases(t, dir)
			if len(bases) < 3 || bases[0] > start {
				t.Fatalf("segments %v, replay from %d", bases, start)
			}
			gone := bases[1]
			if which == "first" {
				gone = bases[0]
			}
			if err := os.Remove(filepath.Join(dir, logDir, segment.FileName(gone))); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{SegmentSize: 1 << 20}, clk, nil)
			t.Log(err)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open without segment %d: %v", gone, err)
			}
		})
	}
}

// Records larger than a segment get a segment of their own and come back
// after a restart.
func TestRecovery_RecordLargerThanASegment(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{SegmentSize: 1 << 20}, clk)
	h.appendDue("a", 3, epoch.Add(time.Minute), time.Second)
	big, err := encodeBody("big", epoch.Add(time.Minute), make([]byte, 3<<20))
	if err != nil {
		t.Fatal(err)
	}
	h.append(big)
	h.appendDue("b", 3, epoch.Add(time.Minute), time.Second)
	if bases := logBases(t, dir); len(bases) != 3 || bases[2]-bases[1] <= 3<<20 {
		t.Fatalf("segments %v: want the big record's own between two", bases)
	}
	h.reopen()
	clk.Advance(time.Hour)
	h.waitCount(7)
	h.settle()
	h.expectOnce("a", 3)
	h.expectOnce("b", 3)
	if h.times("big") != 1 {
		t.Fatal("the big message was not delivered once")
	}
}
