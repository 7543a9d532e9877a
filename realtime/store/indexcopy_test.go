package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// copyIndexFixture: a master with n keyed messages over several segments
// (so several runs), its index caught up, and a replica copying its index
// (Options.CopyMessageIndex) that holds every record, committed.
func copyIndexFixture(t *testing.T, n int) (m, r *Store, end int64) {
	t.Helper()
	old := indexRunEntries
	indexRunEntries = 500
	t.Cleanup(func() { indexRunEntries = old })
	opts := replicaOptions()
	m = openStore(t, t.TempDir(), opts)
	t.Cleanup(func() { m.Close() })
	for i := 0; i < n; i += 50 {
		var batch [][]byte
		for j := i; j < i+50; j++ {
			batch = append(batch, encodeKeyed(t, fmt.Sprintf("s%d", j%3), fmt.Sprintf("id-%d", j), fmt.Sprintf("key-%d", j%40), 0))
		}
		appendAll(t, m, batch...)
	}
	end, _ = m.CommittedEnds()
	testutil.Eventually(t, 10*time.Second, "the master's index to reach its end", func() bool {
		return m.index.end.Load() >= end
	})
	o := opts
	o.CopyMessageIndex = true
	r = openReplica(t, o, nil)
	return m, r, end
}

// readRun reads the master's run at from through ReadIndexRun in pieces of
// piece bytes (nil: none there yet).
func readRun(t *testing.T, m *Store, from int64, piece int) []byte {
	t.Helper()
	var image []byte
	for {
		buf := make([]byte, piece)
		n, size, _, err := m.ReadIndexRun(from, int64(len(image)), buf)
		if err != nil {
			t.Fatalf("run at %d, position %d: %v", from, len(image), err)
		}
		if size == 0 {
			return nil
		}
		image = append(image, buf[:n]...)
		if int64(len(image)) == size {
			return image
		}
		if n == 0 {
			t.Fatalf("run at %d: read nothing at %d of %d", from, len(image), size)
		}
	}
}

// copyRuns installs every run the master has past the replica's index end.
func copyRuns(t *testing.T, m, r *Store) int {
	t.Helper()
	copied := 0
	for {
		end, copying, behind := r.Replica().CopiedIndexEnd()
		if !copying || !behind {
			return copied
		}
		image := readRun(t, m, end, 4096)
		if image == nil {
			return copied
		}
		if err := r.Replica().AddIndexRun(image); err != nil {
			t.Fatalf("run at %d: %v", end, err)
		}
		copied++
	}
}

func findAll(t *testing.T, s *Store, n int) {
	t.Helper()
	for j := 0; j < n; j++ {
		fs, err := s.Lookup().ByID(fmt.Sprintf("id-%d", j))
		got := foundIDs(t, fs, err)
		if want := fmt.Sprintf("s%d/id-%d", j%3, j); len(got) != 1 || got[0] != want {
			t.Fatalf("id-%d found as %v, want %s", j, got, want)
		}
	}
	fs, err := s.Lookup().ByKey("key-7")
	got := foundIDs(t, fs, err)
	if want := (n + 32) / 40; len(got) != want {
		t.Fatalf("key-7 found %d times, want %d: %v", len(got), want, got)
	}
}

// A replica copies its master's index runs (byte for byte, never a run
// past what it has indexed), indexes nothing itself meanwhile, finds the
// messages the runs cover and says it is catching up for the others; once
// promoted it indexes only the log past the last copied run and finds
// every message.
func TestReplicaCopiesMasterIndexRuns(t *testing.T) {
	const n = 3000
	m, r, end := copyIndexFixture(t, n)
	first := readRun(t, m, 0, 1<<20)
	if first == nil {
		t.Fatal("the master has no run at 0")
	}
	if err := r.Replica().AddIndexRun(first); !errors.Is(err, ErrIndexRunAhead) {
		t.Fatalf("a run past the copy added: %v", err)
	}
	copyTailChunks(t, m, r, 4000, nil)
	if err := r.Replica().ReplicateMessages(LogChunk{End: end, Offset: end}); err != nil {
		t.Fatal(err)
	}
	if copied := copyRuns(t, m, r); copied < 3 {
		t.Fatalf("copied %d runs, want several", copied)
	}
	if _, _, _, err := m.ReadIndexRun(1, 0, make([]byte, 16)); !errors.Is(err, ErrIndexRunMismatch) {
		t.Fatalf("a run asked at no run's start: %v", err)
	}
	// Byte for byte the master's, and nothing of its own.
	mine := indexRuns(t, r.dir)
	if len(mine) < 3 {
		t.Fatalf("the replica holds %d runs", len(mine))
	}
	for _, p := range mine {
		a, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(m.dir, indexDir, filepath.Base(p)))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("copied run %s differs from the master's (%v)", filepath.Base(p), err)
		}
	}
	r.index.mu.RLock()
	mem := len(r.index.mem)
	r.index.mu.RUnlock()
	r.index.feed.mu.Lock()
	fed := len(r.index.feed.entries)
	r.index.feed.mu.Unlock()
	if mem != 0 || fed != 0 {
		t.Fatalf("the copying replica indexed records itself: %d in memory, %d fed", mem, fed)
	}
	copiedEnd, _, behind := r.Replica().CopiedIndexEnd()
	if !behind || copiedEnd >= end {
		t.Fatalf("the master's last entries are in a run already (index end %d of %d): the test does not reach the tail", copiedEnd, end)
	}
	// Past the last run: read from the log, not missed.
	findAll(t, r, n)
	reads := len(indexRuns(t, r.dir))
	if err := r.Replica().Promote(); err != nil {
		t.Fatal(err)
	}
	findAll(t, r, n)
	// The tail past the copied runs was indexed, the copied runs kept.
	r.index.mu.RLock()
	kept := 0
	for _, run := range r.index.runs {
		if run.to <= copiedEnd {
			kept++
		}
	}
	r.index.mu.RUnlock()
	if kept != reads {
		t.Fatalf("after the promotion %d of the %d copied runs are left", kept, reads)
	}
	// And a restart keeps them.
	dir := r.dir
	r.Close()
	o := replicaOptions()
	re := openStore(t, dir, o)
	defer re.Close()
	findAll(t, re, n)
}

// A copied run that does not check is refused (and removed), and the
// replica then indexes its log itself and finds every message.
func TestReplicaCopiedRunDamagedBuildsFromLog(t *testing.T) {
	const n = 1500
	m, r, end := copyIndexFixture(t, n)
	copyTailChunks(t, m, r, 4000, nil)
	if err := r.Replica().ReplicateMessages(LogChunk{End: end, Offset: end}); err != nil {
		t.Fatal(err)
	}
	image := readRun(t, m, 0, 1<<20)
	bad := slices.Clone(image)
	bad[indexHeaderSize+3] ^= 0x40 // the bucket table
	if err := r.Replica().AddIndexRun(bad); !errors.Is(err, ErrIndexRunMismatch) {
		t.Fatalf("a damaged run added: %v", err)
	}
	if runs := indexRuns(t, r.dir); len(runs) != 0 {
		t.Fatalf("the damaged run was left: %v", runs)
	}
	r.Replica().BuildMessageIndex()
	if _, copying, _ := r.Replica().CopiedIndexEnd(); copying {
		t.Fatal("still copying")
	}
	if err := r.Replica().AddIndexRun(image); !errors.Is(err, ErrIndexRunMismatch) {
		t.Fatalf("a run added to an index that builds its own: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the replica's own index to reach its end", func() bool {
		return r.index.end.Load() >= end
	})
	findAll(t, r, n)
}
