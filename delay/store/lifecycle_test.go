package store

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestLifecycle_AfterClose(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	s, err := Open(dir, Options{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	res := s.AppendWait([][]byte{encode(t, "late", epoch)})
	if !errors.Is(res[0].Err, protocol.ErrShuttingDown) {
		t.Fatalf("append after close: %v", res[0].Err)
	}
	if err := s.MarkDispatched([]Ref{{hour: 1, offset: 0}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("MarkDispatched after close: %v", err)
	}
	if err := s.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after close: %v", err)
	}
	if _, ok := <-s.Due(); ok {
		t.Fatal("Due not closed")
	}
}

// TestLifecycle_WriteFailureIsSticky makes the message log unwritable: the
// appends in flight and every later one fail with ErrStoreError, nothing is
// reported stored that was not, and a reopened store works again.
func TestLifecycle_WriteFailureIsSticky(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	disk := fsutil.NewFaultFS(nil)
	h := newHarness(t, dir, Options{FS: disk}, clk)
	h.appendDue("ok", 5, epoch.Add(time.Second), time.Millisecond)
	disk.Fail(fsutil.OpWrite|fsutil.OpSync, syscall.EIO) // the disk goes away under the writer
	for i := 0; i < 2; i++ {
		res := h.store.AppendWait([][]byte{encode(t, "lost", epoch.Add(time.Second))})
		if !errors.Is(res[0].Err, protocol.ErrStoreError) {
			t.Fatalf("append %d after a write failure: %v", i, res[0].Err)
		}
		if protocol.StatusOf(res[0].Err) != protocol.StatusStoreError {
			t.Fatalf("status %v", protocol.StatusOf(res[0].Err))
		}
	}
	if err := h.store.Close(); !errors.Is(err, syscall.EIO) { // reports the failure
		t.Fatalf("Close after a write failure: %v", err)
	}
	h.store = nil
	disk.Heal()
	h.open()
	h.appendDue("again", 5, epoch.Add(time.Second), time.Millisecond)
	clk.Advance(2 * time.Second)
	h.waitCount(10)
	h.settle()
	h.expectOnce("ok", 5)
	h.expectOnce("again", 5)
	if h.times("lost") != 0 {
		t.Fatal("a message reported failed was delivered")
	}
}
