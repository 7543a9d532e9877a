package store

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/segment"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// The store drops the message log's durable bytes behind PageCacheWindow
// from the page cache while appends go on, keeps the window, and every
// message still reads back (from the disk) in a pull.
func TestPageCacheWindow(t *testing.T) {
	dir := t.TempDir()
	testutil.RequireDroppablePageCache(t, dir)
	opts := testOptions()
	opts.PageCacheWindow = 1 << 20
	opts.PageCacheInterval = 10 * time.Millisecond
	opts.ZeroFillAhead = -1 // see TestReplicaPageCacheWindow
	s := openStore(t, dir, opts)
	defer s.Close()
	want := map[string][]byte{}
	for i := range 80 {
		id := fmt.Sprint("m", i)
		m := encode(t, "pc", id, bytes.Repeat([]byte{byte(i)}, 64<<10))
		appendAll(t, s, m)
		want[id] = m
	}
	segmentFile := filepath.Join(dir, "messagelog", segment.FileName(0))
	synced := s.msgLog.Synced()
	if synced < 5<<20 {
		t.Fatalf("the log holds %d durable bytes, want over 5 MiB", synced)
	}
	requireDroppedBehind(t, "store", s, segmentFile, synced)
	if c, _ := testutil.CachedPages(t, segmentFile, synced-(1<<20)+(64<<10), 512<<10); c == 0 {
		t.Fatal("the window itself was dropped")
	}
	pullsBack(t, s, "pc", "g", want)
}

// A replica keeps only ReplicaPageCacheWindow of its log cached; once
// promoted it keeps PageCacheWindow, and what it copied reads back.
func TestReplicaPageCacheWindow(t *testing.T) {
	dir := t.TempDir()
	testutil.RequireDroppablePageCache(t, dir)
	opts := testOptions()
	opts.PageCacheWindow = -1
	m := openStore(t, dir, opts)
	defer m.Close()
	want := map[string][]byte{}
	add := func(s *Store, n int) {
		for range n {
			id := fmt.Sprint("m", len(want))
			msg := encode(t, "pc", id, bytes.Repeat([]byte{byte(len(want))}, 64<<10))
			appendAll(t, s, msg)
			want[id] = msg
		}
	}
	add(m, 60)
	opts.PageCacheWindow = 3 << 20
	opts.ReplicaPageCacheWindow = 1 << 20
	opts.PageCacheInterval = 10 * time.Millisecond
	// Readers behind the window cache what they read again: no message
	// index (it reads the log back) and no zero fill (the kernel's read of
	// each filled range may finish after a drop).
	opts.NoMessageIndex = true
	opts.ZeroFillAhead = -1
	r := openReplica(t, opts, nil)
	replicate(t, m, r, 1<<20)
	segmentFile := filepath.Join(r.dir, "messagelog", segment.FileName(0))
	synced := r.msgLog.Synced()
	requireDroppedBehind(t, "replica", r, segmentFile, synced)
	if err := r.Replica().Promote(); err != nil {
		t.Fatal(err)
	}
	add(r, 140) // 200 messages of 64 KiB in all: well into the second 8 MiB segment
	synced = r.msgLog.Synced()
	second := filepath.Join(r.dir, "messagelog", segment.FileName(opts.SegmentSize))
	inSecond := synced - opts.SegmentSize
	if inSecond < 3<<20+512<<10 {
		t.Fatalf("the second segment holds %d bytes, want over 3.5 MiB", inSecond)
	}
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if c, n := testutil.CachedPages(t, second, 0, inSecond-(3<<20)-(256<<10)); c > testutil.DropSlack(n) {
			return fmt.Errorf("promoted: %d of the %d pages behind its window still cached", c, n)
		}
		return nil
	})
	if c, n := testutil.CachedPages(t, second, inSecond-(3<<20)+(64<<10), 2<<20); c != n {
		t.Fatalf("promoted: %d of the %d pages inside its window cached, want all (the replica's window still in use?)", c, n)
	}
	pullsBack(t, r, "pc", "g", want)
}

// requireDroppedBehind waits until s has dropped (its counter) and the
// kernel no longer caches (mincore) the first segment's bytes more than a
// 1 MiB window behind synced, less a page-cache interval's slack.
func requireDroppedBehind(t *testing.T, who string, s *Store, segmentFile string, synced int64) {
	t.Helper()
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if d := s.Stats().PageCacheDropped; d < synced-(1<<20)-(64<<10) {
			return fmt.Errorf("%s: dropped %d bytes, want all but the window of %d", who, d, synced)
		}
		if c, n := testutil.CachedPages(t, segmentFile, 0, synced-(1<<20)-(256<<10)); c > testutil.DropSlack(n) {
			return fmt.Errorf("%s: %d of the %d pages behind the window still cached", who, c, n)
		}
		return nil
	})
}
