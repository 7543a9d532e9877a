package store

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// appendDue appends n messages named prefix-i, due at base + i*step.
func (h *harness) appendDue(prefix string, n int, base time.Time, step time.Duration) {
	h.t.Helper()
	msgs := make([][]byte, n)
	for i, id := range ids(prefix, n) {
		msgs[i] = encode(h.t, id, base.Add(time.Duration(i)*step))
	}
	h.append(msgs...)
}

// expectOnce checks that every id of prefix-0..n-1 was delivered exactly once.
func (h *harness) expectOnce(prefix string, n int) {
	h.t.Helper()
	for _, id := range ids(prefix, n) {
		if got := h.times(id); got != 1 {
			h.t.Fatalf("%s delivered %d times, want 1", id, got)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestRecovery_TornWALTail(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("a", 50, epoch.Add(time.Minute), time.Second)
	end := h.store.Stats().WALWritten
	h.close()
	// A record cut short after the last acknowledged one.
	path, base := lastSegment(t, dir)
	torn := logRecordBytes(t, epoch.UnixMilli(), encode(t, "torn", epoch))
	appendBytes(t, path, end-base, torn[:len(torn)-7])
	h.open()
	h.appendDue("b", 50, epoch.Add(2*time.Minute), time.Second)
	h.reopen() // the new records must be readable after the cut point
	clk.Advance(time.Hour)
	h.waitCount(100)
	h.settle()
	h.expectOnce("a", 50)
	h.expectOnce("b", 50)
	if h.times("torn") != 0 {
		t.Fatal("torn record delivered")
	}
}

func TestRecovery_GarbageWALTailAfterUnreplayedRecords(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("a", 20, epoch.Add(time.Minute), time.Second)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	old := mustRead(t, filepath.Join(dir, checkpointFile))
	h.appendDue("b", 20, epoch.Add(2*time.Minute), time.Second)
	end := h.store.Stats().WALWritten
	h.close()
	// Back to the older checkpoint (as after a crash before the next one),
	// with garbage after the log's last record.
	mustWrite(t, filepath.Join(dir, checkpointFile), old)
	path, base := lastSegment(t, dir)
	appendBytes(t, path, end-base, []byte{0, 0, 0, 40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	h.open()
	clk.Advance(time.Hour)
	h.waitCount(40)
	h.settle()
	h.expectOnce("a", 20)
	h.expectOnce("b", 20)
}

// TestRecovery_ReplayIsDeterministic crashes (an old checkpoint) after
// messages were replayed, delivered and marked: the replay must rebuild them
// at the same offsets so their dispatch entries still hold.
func TestRecovery_ReplayIsDeterministic(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("future", 30, epoch.Add(10*time.Minute), time.Second)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	old := mustRead(t, filepath.Join(dir, checkpointFile))
	h.appendDue("now", 30, epoch.Add(-time.Minute), time.Millisecond)
	h.appendDue("later", 30, epoch.Add(11*time.Minute), time.Second)
	h.waitCount(30)
	h.close()
	mustWrite(t, filepath.Join(dir, checkpointFile), old)
	h.open()
	h.settle()
	if h.count() != 30 {
		t.Fatalf("%d deliveries after restart, want 30: marks no longer match the rebuilt files", h.count())
	}
	clk.Advance(time.Hour)
	h.waitCount(90)
	h.settle()
	h.expectOnce("future", 30)
	h.expectOnce("now", 30)
	h.expectOnce("later", 30)
}

func TestRecovery_TornScheduleTail(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	due := epoch.Add(2 * time.Hour)
	h.appendDue("a", 40, due, time.Second)
	h.close()
	path := filepath.Join(dir, scheduleDir, hourName(hourOf(due.UnixMilli())))
	b := mustRead(t, path)
	rec := appendScheduleRecord(nil, 1<<40, encode(t, "torn", due))
	mustWrite(t, path, append(b, rec[:len(rec)/2]...))
	h.open()
	h.appendDue("b", 10, due.Add(time.Minute), time.Second)
	clk.Advance(3 * time.Hour)
	h.waitCount(50)
	h.settle()
	h.expectOnce("a", 40)
	h.expectOnce("b", 10)
}

func TestRecovery_ScheduleFileLosesSyncedBytes(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	due := epoch.Add(2 * time.Hour)
	h.appendDue("a", 40, due, time.Second)
	h.close()
	path := filepath.Join(dir, scheduleDir, hourName(hourOf(due.UnixMilli())))
	b := mustRead(t, path)
	mustWrite(t, path, b[:len(b)-10]) // the disk lost the end of the last record
	h.open()
	clk.Advance(3 * time.Hour)
	h.waitCount(39)
	h.settle()
	h.expectOnce("a", 39)
	if st := h.store.Stats(); st.Pending != 0 {
		t.Fatalf("pending %d after the loss was accounted", st.Pending)
	}
}

func TestRecovery_TornDispatchTail(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("a", 40, epoch.Add(time.Second), time.Second)
	clk.Advance(20 * time.Second)
	h.waitCount(20)
	h.close()
	path := filepath.Join(dir, dispatchDir, hourName(hourOf(epoch.UnixMilli())))
	b := mustRead(t, path)
	if len(b) != 20*dispatchEntrySize {
		t.Fatalf("dispatch log of %d bytes, want %d", len(b), 20*dispatchEntrySize)
	}
	bad := appendDispatchEntry(nil, 12345)
	bad[9] ^= 1 // an entry failing its CRC, then half an entry
	mustWrite(t, path, append(append(b, bad...), 1, 2, 3, 4, 5))
	h.open()
	clk.Advance(time.Minute)
	h.waitCount(40)
	h.settle()
	h.expectOnce("a", 40)
	if got := int64(len(mustRead(t, path))); got != 40*dispatchEntrySize {
		t.Fatalf("dispatch log is %d bytes after repair and 20 more marks, want %d", got, 40*dispatchEntrySize)
	}
}

func TestRecovery_MissingCheckpointWholeLog(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("a", 40, epoch.Add(time.Second), time.Minute) // spans the hour
	h.appendDue("b", 40, epoch.Add(5*time.Hour), time.Minute) // not loaded yet
	clk.Advance(10 * time.Minute)
	h.waitCount(10)
	h.close()
	if err := os.Remove(filepath.Join(dir, checkpointFile)); err != nil {
		t.Fatal(err)
	}
	h.open()
	h.settle()
	if h.count() != 10 {
		t.Fatalf("%d deliveries after rebuild, want 10", h.count())
	}
	clk.Advance(10 * time.Hour)
	h.waitCount(80)
	h.settle()
	h.expectOnce("a", 40)
	h.expectOnce("b", 40)
}

func TestRecovery_CorruptCheckpointTrimmedLog(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	opts := Options{SegmentSize: 1 << 20}
	h := newHarness(t, dir, opts, clk)
	// Enough bytes to roll several segments, so the checkpoint trims the log.
	big := make([]byte, 60<<10)
	var msgs [][]byte
	for i, id := range ids("a", 60) {
		m, err := encodeBody(id, epoch.Add(time.Duration(i)*time.Minute), big)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	h.append(msgs...)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	h.appendDue("b", 20, epoch.Add(30*time.Minute), time.Second)
	clk.Advance(5 * time.Minute)
	h.waitCount(6)
	h.close()
	segs := logBases(t, dir)
	if segs[0] == 0 {
		t.Fatalf("log was not trimmed: segments %v", segs)
	}
	ck := mustRead(t, filepath.Join(dir, checkpointFile))
	ck[len(ck)-1] ^= 0xff
	mustWrite(t, filepath.Join(dir, checkpointFile), ck)
	h.open()
	clk.Advance(3 * time.Hour)
	h.waitCount(80)
	h.settle()
	h.expectOnce("a", 60)
	h.expectOnce("b", 20)
}

func TestRecovery_LockedDirectory(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	newHarness(t, dir, Options{}, clk)
	if _, err := Open(dir, Options{}, clk, nil); err == nil {
		t.Fatal("second Open of a locked directory succeeded")
	}
}

func TestCheckpoint_RoundTripAndRejects(t *testing.T) {
	c := checkpoint{walOffset: 12345, hours: []hourCheckpoint{{1, 2, 3}, {500000, 1 << 40, 7}}}
	b := c.encode()
	got, err := decodeCheckpoint(b)
	if err != nil || got.walOffset != c.walOffset || len(got.hours) != 2 || got.hours[1] != c.hours[1] {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for i := 0; i < len(b); i++ {
		if _, err := decodeCheckpoint(b[:i]); err == nil {
			t.Fatalf("truncated checkpoint of %d bytes accepted", i)
		}
	}
	bad := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(bad[16:], 3)
	if _, err := decodeCheckpoint(bad); err == nil {
		t.Fatal("wrong count accepted")
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add((&checkpoint{walOffset: 1, hours: []hourCheckpoint{{1, 2, 3}}}).encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if again, err := decodeCheckpoint(c.encode()); err != nil || again.walOffset != c.walOffset || len(again.hours) != len(c.hours) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}

// TestRecovery_LowerLimitsKeepStoredMessages reopens with a smaller message
// limit: messages stored under the old limit are still delivered, from the
// message log and from the schedule files.
func TestRecovery_LowerLimitsKeepStoredMessages(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	big, err := encodeBody("big", epoch.Add(2*time.Hour), make([]byte, 2<<20))
	if err != nil {
		t.Fatal(err)
	}
	h.append(big)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	old := mustRead(t, filepath.Join(dir, checkpointFile))
	big2, _ := encodeBody("big2", epoch.Add(2*time.Hour), make([]byte, 2<<20))
	h.append(big2)
	h.close()
	mustWrite(t, filepath.Join(dir, checkpointFile), old) // big2 replays from the log
	h.opts.Limits = protocol.DefaultLimits
	h.opts.Limits.MaxBody = 1 << 20
	h.opts.Limits.MaxPropertyBytes = 1
	h.open()
	clk.Advance(3 * time.Hour)
	h.waitCount(2)
	h.settle()
	if h.times("big") != 1 || h.times("big2") != 1 {
		t.Fatalf("delivered %v", h.received)
	}
}
