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
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if c, n := testutil.CachedPages(t, segmentFile, 0, synced-(1<<20)-(256<<10)); c != 0 {
			return fmt.Errorf("%d of the %d pages behind the window still cached", c, n)
		}
		return nil
	})
	if c, _ := testutil.CachedPages(t, segmentFile, synced-(1<<20)+(64<<10), 512<<10); c == 0 {
		t.Fatal("the window itself was dropped")
	}
	if d := s.Stats().PageCacheDropped; d < synced-(1<<20)-(256<<10)-(64<<10) {
		t.Fatalf("Stats().PageCacheDropped = %d, want about %d", d, synced-(1<<20))
	}
	pullsBack(t, s, "pc", "g", want)
}
