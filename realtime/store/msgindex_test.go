package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

func encodeKeyed(t testing.TB, subject, id, key string, attempts uint16) []byte {
	t.Helper()
	m := &protocol.Message{Subject: subject, ID: id, Body: []byte("body of " + id), Created: time.UnixMilli(1), Attempts: attempts}
	if key != "" {
		m.Properties = []protocol.Property{{Key: "other", Value: "x"}, {Key: protocol.PropKey, Value: key}}
	}
	b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func foundIDs(t testing.TB, fs []Found, err error) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		v, err := protocol.ParseMessage(f.Message)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Subject+"/"+string(v.ID))
	}
	return out
}

func indexRuns(t testing.TB, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, indexDir, "*.run"))
	return m
}

// Messages are found by id (every stored copy: original, retry, dead
// letter) and by key, in memory and from runs; unknown ids and keys find
// nothing; the index survives a clean restart (runs) and a crash (rebuilt
// from the log), and a damaged run is rebuilt.
func TestMessageIndex_FindByIDAndKey(t *testing.T) {
	old := indexRunEntries
	indexRunEntries = 64 // many runs
	t.Cleanup(func() { indexRunEntries = old })
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	const n = 500
	for i := 0; i < n; i += 50 {
		var batch [][]byte
		for j := i; j < i+50; j++ {
			batch = append(batch, encodeKeyed(t, "orders", fmt.Sprintf("id-%d", j), fmt.Sprintf("order-%d", j%100), 0))
		}
		appendAll(t, s, batch...)
		// One batch at a time into the index, so that its entries spill
		// into runs of at most 64 as they come (the index follows the log
		// on its own goroutine, and could otherwise take all at once).
		testutil.Eventually(t, 10*time.Second, "the index to reach the log's end", func() bool {
			return s.index.end.Load() >= s.committedMessages()
		})
	}
	appendAll(t, s, encodeKeyed(t, protocol.RetrySubject("orders", "billing"), "id-7", "order-7", 1),
		encodeKeyed(t, protocol.DeadSubject("orders", "billing"), "id-7", "order-7", 2))
	check := func(s *Store, when string) {
		t.Helper()
		got := foundIDs(t, nil, nil)
		fs, err := s.Lookup().ByID("id-7")
		got = foundIDs(t, fs, err)
		want := []string{"orders/id-7", "%RETRY%orders%billing/id-7", "%DEAD%orders%billing/id-7"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: id-7 found %v, want %v", when, got, want)
		}
		if fs[0].Seq != 7 || fs[0].Stored.IsZero() || fs[0].Offset >= fs[1].Offset {
			t.Fatalf("%s: found %+v", when, fs[0])
		}
		fs, err = s.Lookup().ByKey("order-42")
		if got := foundIDs(t, fs, err); strings.Join(got, " ") != "orders/id-42 orders/id-142 orders/id-242 orders/id-342 orders/id-442" {
			t.Fatalf("%s: key order-42 found %v", when, got)
		}
		for _, unknown := range []string{"id-500", "order-42", ""} {
			if fs, err := s.Lookup().ByID(unknown); err != nil || len(fs) != 0 {
				t.Fatalf("%s: unknown id %q found %d, %v", when, unknown, len(fs), err)
			}
		}
		if fs, err := s.Lookup().ByKey("order-100"); err != nil || len(fs) != 0 {
			t.Fatalf("%s: unknown key found %d, %v", when, len(fs), err)
		}
		for i := 0; i < n; i += 37 {
			if fs, err := s.Lookup().ByID(fmt.Sprintf("id-%d", i)); err != nil || len(fs) != 1 {
				t.Fatalf("%s: id-%d found %d, %v", when, i, len(fs), err)
			}
		}
	}
	check(s, "live")
	if len(indexRuns(t, dir)) < 5 {
		t.Fatalf("only %d runs written with 64 entries a run", len(indexRuns(t, dir)))
	}
	// A crash (the files as SIGKILL leaves them, entries in memory lost).
	crashed := crashCopy(t, dir)
	s.Close()
	s2 := openStore(t, crashed, testOptions())
	check(s2, "after a crash")
	s2.Close()
	// A clean restart, then one with a damaged run.
	s3 := openStore(t, dir, testOptions())
	check(s3, "after a restart")
	s3.Close()
	runs := indexRuns(t, dir)
	f, err := os.OpenFile(runs[len(runs)/2], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	f.WriteAt([]byte{0xff, 0xee}, st.Size()-6) // a fence
	f.Close()
	s4 := openStore(t, dir, testOptions())
	defer s4.Close()
	check(s4, "after a damaged run")
}

// Retention drops the index with the data: messages of deleted segments
// are no longer found and their runs are gone; later ones still are.
func TestMessageIndex_Retention(t *testing.T) {
	clock := newTestClock()
	opts := retentionOptions(clock)
	opts.RetentionBytes = 2 << 20
	dir := t.TempDir()
	s := openStore(t, dir, opts)
	defer s.Close()
	n := fill(t, s, "a", 5, clock)
	if fs, err := s.Lookup().ByID("a0"); err != nil || len(fs) != 1 {
		t.Fatalf("a0 before retention: %d, %v", len(fs), err)
	}
	s.index.mu.Lock()
	s.index.spillLocked()
	s.index.mu.Unlock()
	before := len(indexRuns(t, dir))
	if _, err := s.runRetention(); err != nil {
		t.Fatal(err)
	}
	if fs, err := s.Lookup().ByID("a0"); err != nil || len(fs) != 0 {
		t.Fatalf("a0 after retention: %d, %v", len(fs), err)
	}
	last := fmt.Sprint("a", n-1)
	if fs, err := s.Lookup().ByID(last); err != nil || len(fs) != 1 {
		t.Fatalf("%s after retention: %d, %v", last, len(fs), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(indexRuns(t, dir)) >= before {
		if time.Now().After(deadline) {
			t.Fatalf("runs of deleted segments kept: %d before, %d after", before, len(indexRuns(t, dir)))
		}
		time.Sleep(10 * time.Millisecond)
		s.index.retain(s.msgLog.Start()) // the loop does it on its next wake
	}
}

// Without the index, lookups say so.
func TestMessageIndex_Off(t *testing.T) {
	opts := testOptions()
	opts.NoMessageIndex = true
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	if _, err := s.Lookup().ByID("x"); err != ErrNoIndex {
		t.Fatalf("Lookup.ByID without an index: %v", err)
	}
}

// The entries appends hand the index (the feed) are the ones reading the
// log back gives: under both flush policies, with appends from several
// goroutines (groups of several requests), groups written across a
// segment's end, and a feed small enough to drop groups (read back from
// the log); no run spans two segments.
func TestMessageIndex_FedMatchesLog(t *testing.T) {
	oldRun, oldFeed := indexRunEntries, indexFeedMax
	indexRunEntries, indexFeedMax = 300, 200
	t.Cleanup(func() { indexRunEntries, indexFeedMax = oldRun, oldFeed })
	for _, flush := range []FlushPolicy{FlushSync, FlushAsync} {
		t.Run(fmt.Sprint(flush), func(t *testing.T) {
			opts := testOptions()
			opts.SegmentSize = 2 << 20
			opts.Limits = protocol.DefaultLimits
			opts.Limits.MaxBody = 16 << 10
			opts.Flush = flush
			core, logs := observer.New(zap.WarnLevel)
			s, err := Open(t.TempDir(), opts, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			type want struct {
				h   uint64
				off int64
			}
			var mu sync.Mutex
			var wants []want
			body := strings.Repeat("b", 3000)
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						var batch [][]byte
						var ids, keys []string
						for j := range 1 + i%7 {
							id := fmt.Sprintf("w%d-%d-%d", w, i, j)
							key := ""
							if j%2 == 0 {
								key = "k-" + id
							}
							m := &protocol.Message{Subject: fmt.Sprintf("s%d", j%3), ID: id, Body: []byte(body), Created: time.UnixMilli(1)}
							if key != "" {
								m.Properties = []protocol.Property{{Key: protocol.PropKey, Value: key}}
							}
							b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
							if err != nil {
								t.Error(err)
								return
							}
							batch, ids, keys = append(batch, b), append(ids, id), append(keys, key)
						}
						var res []Result
						if r, ok := s.tryAppendNow(batch); ok {
							res = r
						} else {
							var err error
							if res, err = s.Append(context.Background(), batch); err != nil {
								t.Error(err)
								return
							}
						}
						mu.Lock()
						for j, r := range res {
							if r.Err != nil {
								t.Error(r.Err)
								continue
							}
							wants = append(wants, want{indexHash(indexKindID, []byte(ids[j])), r.Offset})
							if keys[j] != "" {
								wants = append(wants, want{indexHash(indexKindKey, []byte(keys[j])), r.Offset})
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if flush == FlushAsync {
				s.msgLog.Sync()
			}
			if len(s.msgLog.Segments()) < 3 {
				t.Fatalf("only %d segments written", len(s.msgLog.Segments()))
			}
			if fs, err := s.Lookup().ByID("w3-99-0"); err != nil || len(fs) != 1 { // waits for the index
				t.Fatalf("w3-59-0 found %d, %v", len(fs), err)
			}
			x := s.index
			x.mu.Lock()
			defer x.mu.Unlock()
			x.spillLocked()
			var got []want
			segs := s.msgLog.Segments()
			for _, r := range x.runs {
				b := make([]byte, r.count*indexEntrySize)
				if _, err := r.f.ReadAt(b, indexHeaderSize); err != nil {
					t.Fatal(err)
				}
				for p := 0; p < len(b); p += indexEntrySize {
					got = append(got, want{binary.BigEndian.Uint64(b[p:]), int64(binary.BigEndian.Uint64(b[p+8:]))})
				}
				for _, sg := range segs {
					if r.from >= sg.Base && r.from < sg.Base+sg.Size && r.to > sg.Base+sg.Size {
						t.Errorf("run [%d, %d) spans the segment [%d, %d)", r.from, r.to, sg.Base, sg.Base+sg.Size)
					}
				}
			}
			cmp := func(a, b want) int {
				if c := cmpU64(a.h, b.h); c != 0 {
					return c
				}
				return int(a.off - b.off)
			}
			slices.SortFunc(got, cmp)
			slices.SortFunc(wants, cmp)
			if !slices.Equal(got, wants) {
				t.Fatalf("the index holds %d entries, want %d (first difference at %d)", len(got), len(wants), firstDiff(got, wants))
			}
			// Under FlushAsync the feed takes the index past the synced
			// end: the index must not try to read the log there.
			if n := logs.Len(); n > 0 {
				t.Fatalf("%d warnings, the first %q", n, logs.All()[0].Message)
			}
		})
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func firstDiff[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A store whose index holds runs of format 1 (FNV-1a hashes, by the whole
// hash), as older code wrote them, finds their messages, and the ones
// indexed since (format 2) too.
func TestMessageIndex_ReadsFormat1Runs(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	var entries []indexEntry
	for i := range 300 {
		id, key := fmt.Sprintf("old-%d", i), fmt.Sprintf("okey-%d", i%10)
		res := appendAll(t, s, encodeKeyed(t, "orders", id, key, 0))
		entries = append(entries, indexEntry{indexHashFNV(indexKindID, []byte(id)), res[0].Offset},
			indexEntry{indexHashFNV(indexKindKey, []byte(key)), res[0].Offset})
	}
	end := s.committedMessages()
	s.Close()
	for _, r := range indexRuns(t, dir) {
		os.Remove(r)
	}
	slices.SortStableFunc(entries, func(a, b indexEntry) int { return cmpU64(a.hash, b.hash) })
	r, err := writeIndexRun(filepath.Join(dir, indexDir), 0, end, entries)
	if err != nil {
		t.Fatal(err)
	}
	r.f.Close()
	asFormat1(t, r.path)
	s = openStore(t, dir, testOptions())
	defer s.Close()
	s.index.mu.RLock() // indexLoop may be retaining runs meanwhile
	runs, format1 := len(s.index.runs), len(s.index.runs) == 1 && s.index.runs[0].shift == 0
	s.index.mu.RUnlock()
	if s.index.end.Load() != end || !format1 {
		t.Fatalf("the format 1 run was not kept: index end %d (log %d), %d runs", s.index.end.Load(), end, runs)
	}
	appendAll(t, s, encodeKeyed(t, "orders", "new-1", "okey-3", 0))
	for _, id := range []string{"old-0", "old-123", "old-299", "new-1"} {
		fs, err := s.Lookup().ByID(id)
		if got := foundIDs(t, fs, err); strings.Join(got, " ") != "orders/"+id {
			t.Fatalf("%s found %v", id, got)
		}
	}
	fs, err := s.Lookup().ByKey("okey-3")
	if got := foundIDs(t, fs, err); len(got) != 31 || got[30] != "orders/new-1" {
		t.Fatalf("okey-3 found %d: %v", len(got), got)
	}
}
