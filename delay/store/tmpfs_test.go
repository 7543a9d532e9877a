package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// TestStore_FullTmpfs fills a real 16 MiB tmpfs (root only; skipped
// elsewhere) with delayed messages until the disk is full: appends fail
// with ErrStoreError and ENOSPC, every acknowledged message is delivered at
// its time and no refused one is, and once space is freed the same store
// (not reopened) takes and delivers messages again.
func TestStore_FullTmpfs(t *testing.T) {
	// 5 MiB for the store; freeing the filler gives back 11 MiB, room for
	// the stalled replay's schedule files, a new segment and what follows.
	mnt := testutil.MountTmpfs(t, "16m")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 11<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	opts := Options{SegmentSize: 1 << 20}
	h := newHarness(t, filepath.Join(mnt, "store"), opts, clk)
	body := make([]byte, 3000)
	var acked, refused []string
	var full error
	for i := 0; i < 3000 && full == nil; i++ {
		var msgs [][]byte
		var batch []string
		for k := 0; k < 8; k++ {
			id := fmt.Sprintf("m%d-%d", i, k)
			// Spread over four hours so schedule files grow too.
			m, err := encodeBody(id, epoch.Add(time.Duration(1+k%4)*time.Hour), body)
			if err != nil {
				t.Fatal(err)
			}
			msgs, batch = append(msgs, m), append(batch, id)
		}
		for k, r := range h.store.AppendWait(msgs) {
			if r.Err != nil {
				full = r.Err
				refused = append(refused, batch[k])
				continue
			}
			acked = append(acked, batch[k])
		}
	}
	if !errors.Is(full, protocol.ErrStoreError) || !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("filling the disk gave %v", full)
	}
	t.Logf("%d messages acknowledged before the disk was full: %v", len(acked), full)
	if st := h.store.Stats(); st.Refusing == "" {
		t.Fatal("a store on a full disk does not say why it refuses messages")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var after []string
	freed := time.Now()
	h.waitFor("the store to take messages again", func() bool {
		if st := h.store.Stats(); st.Replayed == st.WALDurable { // the replay caught up
			m, err := encodeBody(fmt.Sprintf("after-%d", len(after)), epoch.Add(90*time.Minute), body)
			if err != nil {
				t.Fatal(err)
			}
			if r := h.store.AppendWait([][]byte{m}); r[0].Err == nil {
				after = append(after, fmt.Sprintf("after-%d", len(after)))
				return true
			}
		}
		clk.Advance(time.Second) // the stalled replay retries on the store's clock
		if time.Since(freed) > 15*time.Second {
			out, _ := exec.Command("sh", "-c", "ls -la "+mnt+"/store/*/ ; df "+mnt).CombinedOutput()
			t.Fatalf("still refusing: %s\n%s", h.store.Stats().Refusing, out)
		}
		return false
	})
	// A failed roll is reported until a group needs a new segment and
	// makes one (Stats.Refusing); messages that fit in the current segment
	// are taken meanwhile. How much room the segment kept depends on how
	// the failed group was made up, so append at least 100 and go on until
	// the store has made a segment: a segment's worth more at most.
	for i := 0; i < 100+int(opts.SegmentSize)/len(body); i++ {
		if i >= 100 && h.store.Stats().Refusing == "" {
			break
		}
		id := fmt.Sprintf("after-%d", len(after))
		m, err := encodeBody(id, epoch.Add(90*time.Minute), body)
		if err != nil {
			t.Fatal(err)
		}
		h.append(m)
		after = append(after, id)
	}
	if st := h.store.Stats(); st.Refusing != "" {
		t.Fatalf("the store still refuses after %d more messages: %s", len(after), st.Refusing)
	}
	for step := 0; step < 5*12; step++ {
		clk.Advance(5 * time.Minute)
		h.settle()
	}
	h.waitCount(len(acked) + len(after))
	h.settle()
	for _, id := range append(acked, after...) {
		if n := h.times(id); n != 1 {
			t.Fatalf("acknowledged message %s delivered %d times", id, n)
		}
	}
	for _, id := range refused {
		if n := h.times(id); n != 0 {
			t.Fatalf("refused message %s delivered %d times", id, n)
		}
	}
}

// A copy's write that meets a full disk (a real 2 MiB tmpfs) fails, leaves
// nothing past the copy's size (a partial write's bytes would hold the
// space the retry needs) and succeeds at the same offset once space is
// freed.
func TestReplica_FullTmpfsCutsAFailedWrite(t *testing.T) {
	mnt := testutil.MountTmpfs(t, "2m")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "copy")
	r, err := OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Follow(1)
	h := hourOf(epoch.UnixMilli())
	var chunk []byte
	for i := range 12 {
		m, err := encodeBody(fmt.Sprintf("m%d", i), epoch, make([]byte, 20<<10))
		if err != nil {
			t.Fatal(err)
		}
		chunk = appendScheduleRecord(chunk, int64(i), m)
	}
	var failed error
	for i := 0; i < 20 && failed == nil; i++ {
		failed = r.WriteSchedule(h, r.Hour(h).ScheduleSize, chunk)
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("filling the disk gave %v", failed)
	}
	size := r.Hour(h).ScheduleSize
	if info, err := os.Stat(filepath.Join(dir, scheduleDir, hourName(h))); err != nil || info.Size() != size {
		t.Fatalf("after the failed write the file has %v bytes (%v), the copy %d", info.Size(), err, size)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteSchedule(h, size, chunk); err != nil {
		t.Fatalf("the same write once space is back: %v", err)
	}
	if got := r.Hour(h).ScheduleSize; got != size+int64(len(chunk)) {
		t.Fatalf("copy size %d, want %d", got, size+int64(len(chunk)))
	}
}
