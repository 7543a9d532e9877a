package store

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// A group that cannot start a new message-log segment (a full disk) fails
// alone: the records it had written into the old segment are taken back,
// so a restart does not find them (all records are the same size here, so
// a left-over one would line up with the next and read as valid), and the
// next group is taken.
func TestStore_FailedRollTakesBackTheGroup(t *testing.T) {
	clk := clock.NewFake(epoch)
	const segment = 1 << 20
	disk := fsutil.NewFaultFS(nil)
	h := newHarness(t, t.TempDir(), Options{SegmentSize: segment, FS: disk}, clk)
	due := epoch.Add(time.Hour)
	n := 0
	msg := func(prefix string) ([]byte, string) {
		n++
		id := fmt.Sprintf("%s-%06d", prefix, n) // one length: one record size
		return encode(t, id, due), id
	}
	probe, _ := msg("a")
	record := int64(logRecordOverhead + len(probe))
	var acked []string
	appendOne := func(prefix string) {
		m, id := msg(prefix)
		h.append(m)
		acked = append(acked, id)
	}
	// Fill the first segment until two or three records' room is left.
	for segment-h.store.Stats().WALWritten >= 3*record {
		appendOne("a")
	}
	disk.Fail(fsutil.OpCreate, syscall.ENOSPC) // no new segment file
	var group [][]byte
	var refused []string
	for range 8 {
		m, id := msg("r")
		group, refused = append(group, m), append(refused, id)
	}
	for i, r := range h.store.AppendWait(group) {
		if !errors.Is(r.Err, protocol.ErrStoreError) || !errors.Is(r.Err, syscall.ENOSPC) {
			t.Fatalf("message %d of the group that found the disk full: %v", i, r.Err)
		}
	}
	if st := h.store.Stats(); !strings.Contains(st.Refusing, "no space left") {
		t.Fatalf("Stats.Refusing %q after a group found the disk full", st.Refusing)
	}
	appendOne("a") // fits in the old segment, where the group's records were
	disk.Heal()
	h.reopen()
	for range 20 {
		appendOne("a") // and on into a new segment
	}
	if st := h.store.Stats(); st.Refusing != "" {
		t.Fatalf("Stats.Refusing %q once a new segment was made", st.Refusing)
	}
	clk.Advance(2 * time.Hour)
	h.waitCount(len(acked))
	h.settle()
	for _, id := range refused {
		if h.times(id) != 0 {
			t.Fatalf("refused message %s was delivered", id)
		}
	}
	for _, id := range acked {
		if h.times(id) != 1 {
			t.Fatalf("acknowledged message %s delivered %d times", id, h.times(id))
		}
	}
	if got := h.count(); got != len(acked) {
		t.Fatalf("%d deliveries, want %d", got, len(acked))
	}
}
