package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// testdata/v1store is a data directory the previous release wrote (its
// message log in wal/, format 1), copied while it ran, as a crash leaves
// it: 20 messages due at 10:21 delivered and marked; pend-0..299 due from
// 12:20 on, replayed and checkpointed; tail-0..299 due from 13:20 on,
// appended after the checkpoint (so their records are only in the old log
// past the replay position, which spans two segments); pend-5 and tail-7
// cancelled (control records). The segments' preallocated zeros past
// their data were cut off to keep the copy small (a zero length and the
// file's end both end a segment's data).
const v1Store = "testdata/v1store"

// copyV1 copies the old data directory to a fresh one.
func copyV1(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(dir, os.DirFS(v1Store)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// expectV1Schedule checks that the converted store hands out exactly the
// old one's pending messages, once each.
func expectV1Schedule(t *testing.T, h *harness, extra int) {
	t.Helper()
	h.clock.Set(epoch.Add(4 * time.Hour))
	h.waitCount(598 + extra)
	h.settle()
	for i := 0; i < 300; i++ {
		for _, p := range []string{"pend", "tail"} {
			want := 1
			if (p == "pend" && i == 5) || (p == "tail" && i == 7) {
				want = 0 // cancelled
			}
			if got := h.times(fmt.Sprintf("%s-%d", p, i)); got != want {
				t.Fatalf("%s-%d delivered %d times, want %d", p, i, got, want)
			}
		}
	}
	for i := 0; i < 20; i++ {
		if got := h.times(fmt.Sprintf("done-%d", i)); got != 0 {
			t.Fatalf("done-%d, dispatched before the upgrade, delivered again", i)
		}
	}
	if h.count() != 598+extra {
		t.Fatalf("%d deliveries, want %d", h.count(), 598+extra)
	}
}

func TestMigrate_ConvertsTheOldLog(t *testing.T) {
	dir := copyV1(t)
	clk := clock.NewFake(epoch.Add(5 * time.Minute))
	h := newHarness(t, dir, Options{SegmentSize: 1 << 20}, clk)
	if _, err := os.Stat(filepath.Join(dir, legacyLogDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old log left after the conversion: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, logDir+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary log left: %v", err)
	}
	if bases := logBases(t, dir); len(bases) < 2 || bases[0] != 1300020 {
		t.Fatalf("converted segments %v: want several, from the old replay position 1300020", bases)
	}
	h.reopen() // the converted log is a log like any other
	h.appendDue("new", 10, epoch.Add(3*time.Hour+30*time.Minute), time.Second)
	h.reopen()
	expectV1Schedule(t, h, 10)
	h.expectOnce("new", 10)
}

// A crash before the rename leaves log.tmp beside the old log: the next
// Open converts again. A crash after it leaves the new log and what is
// left of the old one: the new one is kept.
func TestMigrate_CrashDuringConversion(t *testing.T) {
	for _, c := range []string{"before rename", "after rename"} {
		t.Run(c, func(t *testing.T) {
			dir := copyV1(t)
			// The first conversion, as far as the crash let it go.
			if err := convertLegacyLog(dir, Options{SegmentSize: 1 << 20}.withDefaults(), 1300020, true, zap.NewNop()); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(filepath.Join(dir, legacyLogDir), os.DirFS(filepath.Join(v1Store, legacyLogDir))); err != nil {
				t.Fatal(err)
			}
			if c == "before rename" {
				if err := os.Rename(filepath.Join(dir, logDir), filepath.Join(dir, logDir+".tmp")); err != nil {
					t.Fatal(err)
				}
				// and a torn write in the temporary log
				path := filepath.Join(dir, logDir+".tmp", segment.FileName(1300020))
				appendBytes(t, path, 12345, []byte("garbage"))
			}
			h := newHarness(t, dir, Options{SegmentSize: 1 << 20}, clock.NewFake(epoch.Add(5*time.Minute)))
			for _, d := range []string{legacyLogDir, logDir + ".tmp"} {
				if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s left: %v", d, err)
				}
			}
			expectV1Schedule(t, h, 0)
		})
	}
}

// The old log's torn tail (a crash mid-write under the old release) ends
// it, as the old recovery did; what is before it is converted.
func TestMigrate_TornOldTail(t *testing.T) {
	opts := Options{SegmentSize: 1 << 20}
	clean := newHarness(t, copyV1(t), opts, clock.NewFake(epoch.Add(5*time.Minute)))
	end := clean.store.Stats().WALWritten
	clean.close()

	dir := copyV1(t)
	path := filepath.Join(dir, legacyLogDir, "00000000000002096258.wal")
	data := mustRead(t, path)
	// A record header that claims more bytes than follow.
	mustWrite(t, path, append(data, 0, 0, 0x10, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 1, 'x'))
	h := newHarness(t, dir, opts, clock.NewFake(epoch.Add(5*time.Minute)))
	if got := h.store.Stats().WALWritten; got != end {
		t.Fatalf("converted log ends at %d, want %d", got, end)
	}
	expectV1Schedule(t, h, 0)

	// A bad CRC in the last old record (the cancel of pend-5, whose entry
	// the old replay had already put in the dispatch log): that record is
	// cut, and the cancel still holds.
	dir = copyV1(t)
	path = filepath.Join(dir, legacyLogDir, "00000000000002096258.wal")
	data = mustRead(t, path)
	data[len(data)-1] ^= 0xff
	mustWrite(t, path, data)
	h = newHarness(t, dir, opts, clock.NewFake(epoch.Add(5*time.Minute)))
	if got, want := h.store.Stats().WALWritten, end-logRecordOverhead-controlSize; got != want {
		t.Fatalf("converted log ends at %d, want %d (one control record less)", got, want)
	}
	expectV1Schedule(t, h, 0)
}

// Without a checkpoint, an old log whose start was trimmed cannot be
// matched with the schedule files: Open refuses and says what to do.
func TestMigrate_RefusesTrimmedLogWithoutCheckpoint(t *testing.T) {
	dir := copyV1(t)
	if err := os.Remove(filepath.Join(dir, checkpointFile)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{SegmentSize: 1 << 20}, clock.NewFake(epoch), nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "start the previous release once") {
		t.Fatalf("Open of a trimmed old log without a checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, legacyLogDir)); err != nil {
		t.Fatalf("the old log was touched: %v", err)
	}
}

// legacyRecord encodes one old-format (format 1) message-log record.
func legacyRecord(appendMillis int64, msg []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(appendMillis))
	b = append(b, msg...)
	binary.BigEndian.PutUint32(b[4:], protocol.Checksum(b[8:]))
	return b
}

// An old log that was never trimmed and has no checkpoint (a store that
// crashed before its first one) is converted whole, spanning segments
// (the next named by where the previous one's data ended), and the
// schedule is rebuilt from it.
func TestMigrate_WholeLogWithoutCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(filepath.Join(dir, legacyLogDir), 0o700); err != nil {
		t.Fatal(err)
	}
	var seg []byte
	base := int64(0)
	flush := func() {
		if err := os.WriteFile(filepath.Join(dir, legacyLogDir, fmt.Sprintf("%020d.wal", base)), seg, 0o600); err != nil {
			t.Fatal(err)
		}
		base += int64(len(seg))
		seg = nil
	}
	for i, id := range ids("w", 30) {
		seg = append(seg, legacyRecord(epoch.UnixMilli(), encode(t, id, epoch.Add(time.Duration(i)*time.Minute)))...)
		if i%10 == 9 {
			flush()
		}
	}
	h := newHarness(t, dir, Options{}, clock.NewFake(epoch))
	h.clock.Set(epoch.Add(time.Hour))
	h.waitCount(30)
	h.settle()
	h.expectOnce("w", 30)
	if bases := logBases(t, dir); len(bases) != 1 || bases[0] != 0 {
		t.Fatalf("converted segments %v, want one from 0", bases)
	}
}
