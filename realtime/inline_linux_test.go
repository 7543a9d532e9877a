package realtime_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// dropPageCache asks the kernel to drop the cached pages of every file
// under dir (they are clean: the broker's default flush synced them).
func dropPageCache(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBroker_InlinePullFromDiskGoesToWorkers: a pull served on the event
// loop whose messages were not in the page cache (it read from the disk)
// sends its group's pulls to the pull workers for a while; the consumer
// still gets every message once.
func TestBroker_InlinePullFromDiskGoesToWorkers(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Skip("the test directory is not on a block device")
	}
	b := startBroker(t, dir)
	p := newProducer(t, b.addr())
	const n = 20000
	ids := sendN(t, p, "cold", n, nil)
	dropPageCache(t, dir)

	var mu sync.Mutex
	seen := map[string]int{}
	c := newConsumer(t, "c", b.addr())
	if _, err := c.Subscribe("cold", "g", func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		seen[m.ID]++
		mu.Unlock()
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < n {
			return fmt.Errorf("%d of %d messages", len(seen), n)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // a re-delivery would show up as a second copy
	mu.Lock()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("message %s delivered %d times", id, seen[id])
		}
	}
	mu.Unlock()
	slow := counterValue(t, b.Registry(), "qmq_realtime_pulls_inline_slow_total")
	inline := counterValue(t, b.Registry(), "qmq_realtime_pulls_inline_total")
	t.Logf("%v pulls inline, %v of them from the disk or slow", inline, slow)
	if inline == 0 {
		t.Fatal("no pull served inline")
	}
	if slow == 0 {
		t.Fatal("no inline pull counted as reading from the disk after the page cache was dropped")
	}
}
