package segment

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// TestSyncersInParallel syncs from two Syncers and Log.Sync at once while
// a writer appends across many small segments and old segments are
// deleted: every sync covers what was written before it began, Synced only
// moves up, and no descriptor of a deleted segment stays open.
func TestSyncersInParallel(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 8192, TrimStep: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	syncs := func(sync func() (int64, error)) {
		defer wg.Done()
		last := int64(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			before := l.End()
			end, err := sync()
			if err != nil {
				t.Error(err)
				return
			}
			if end < before || l.Synced() < end || end < last {
				t.Errorf("sync covered %d: end before it %d, Synced %d, previous sync %d", end, before, l.Synced(), last)
				return
			}
			last = end
		}
	}
	for i := 0; i < 2; i++ {
		sy := l.NewSyncer()
		defer sy.Close()
		wg.Add(1)
		go syncs(sy.Sync)
	}
	wg.Add(1)
	go syncs(func() (int64, error) {
		end := l.End()
		return end, l.Sync()
	})
	b := l.NewBatch()
	for i := 0; i < 2000; i++ {
		b.Reset()
		for k := 0; k < 3; k++ {
			p := payloadOf(i*3 + k)
			if _, err := b.Append(1, p[:3], p[3:]); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Write(b); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if _, err := l.DeleteBefore(l.Synced() - 3*8192); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	sy := l.NewSyncer()
	defer sy.Close()
	end, err := sy.Sync()
	if err != nil || end != l.End() || l.Synced() != l.End() {
		t.Fatalf("final sync: %d, %v; Synced %d, End %d", end, err, l.Synced(), l.End())
	}
	if n := len(l.unsynced); n != 0 {
		t.Fatalf("%d segments left unsynced", n)
	}
	if _, err := l.DeleteBefore(l.End()); err != nil {
		t.Fatal(err)
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir) && strings.HasSuffix(target, "(deleted)") {
			t.Errorf("descriptor %s still open on %s", fd.Name(), target)
		}
	}
}

// TestSyncerFailurePoisons: a Syncer's failed fdatasync poisons the log
// like Log.Sync's, and after Reset the Syncer syncs again (through new
// descriptors).
func TestSyncerFailurePoisons(t *testing.T) {
	dir := t.TempDir()
	ffs := fsutil.NewFaultFS(nil)
	l, err := OpenLog(dir, LogOptions{FS: ffs, SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sy := l.NewSyncer()
	defer sy.Close()
	want := writeRecords(t, l, 0, 10)
	good := l.Synced()
	b := l.NewBatch()
	b.Append(1, []byte("lost"), nil)
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	ffs.Fail(fsutil.OpSync, syscall.EIO)
	if _, err := sy.Sync(); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrPoisoned) {
		t.Fatalf("sync: %v", err)
	}
	if l.Synced() != good {
		t.Fatalf("Synced %d after a failed sync, want %d", l.Synced(), good)
	}
	ffs.Heal()
	if _, err := sy.Sync(); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("poisoned log synced: %v", err)
	}
	if err := l.Reset(good); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.Append(1, []byte("kept"), nil)
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	if end, err := sy.Sync(); err != nil || end != l.End() {
		t.Fatalf("sync after Reset: %d, %v (end %d)", end, err, l.End())
	}
	got, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want)+1 || string(got[len(got)-1].payload) != "kept" {
		t.Fatalf("recovered %d records, want %d and then \"kept\"", len(got), len(want)+1)
	}
}
