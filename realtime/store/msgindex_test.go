package store

import (
	"context"
	"errors"
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
	f.WriteAt([]byte{0xff, 0xee}, indexHeaderSize+4*indexBuckets/2) // its bucket table
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
			type want = runEntry
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
							wants = append(wants, want{indexHash(indexKindID, []byte(ids[j])) >> indexFragShift, r.Offset})
							if keys[j] != "" {
								wants = append(wants, want{indexHash(indexKindKey, []byte(keys[j])) >> indexFragShift, r.Offset})
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
				b, err := os.ReadFile(r.path)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, decodeRun(t, b)...)
				for _, sg := range segs {
					if r.from >= sg.Base && r.from < sg.Base+sg.Size && r.to > sg.Base+sg.Size {
						t.Errorf("run [%d, %d) spans the segment [%d, %d)", r.from, r.to, sg.Base, sg.Base+sg.Size)
					}
				}
			}
			cmp := func(a, b want) int {
				if c := cmpU64(a.top, b.top); c != 0 {
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

// A store whose index holds runs of formats 1 (FNV-1a hashes, by the whole
// hash) and 2 (by the top 22 bits), as older code wrote them, finds their
// messages, and the ones indexed since (format 3) too.
func TestMessageIndex_ReadsOlderRuns(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	var old [2][]indexEntry // format 1's, format 2's
	var mid int64
	for i := range 600 {
		id, key := fmt.Sprintf("old-%d", i), fmt.Sprintf("okey-%d", i%10)
		res := appendAll(t, s, encodeKeyed(t, "orders", id, key, 0))
		if i < 300 {
			old[0] = append(old[0], indexEntry{indexHashFNV(indexKindID, []byte(id)), res[0].Offset},
				indexEntry{indexHashFNV(indexKindKey, []byte(key)), res[0].Offset})
			mid = s.committedMessages()
			continue
		}
		old[1] = append(old[1], indexEntry{indexHash2(indexKindID, []byte(id)), res[0].Offset},
			indexEntry{indexHash2(indexKindKey, []byte(key)), res[0].Offset})
	}
	end := s.committedMessages()
	s.Close()
	for _, r := range indexRuns(t, dir) {
		os.Remove(r)
	}
	writeOldRun(t, filepath.Join(dir, indexDir), 1, 0, mid, old[0])
	writeOldRun(t, filepath.Join(dir, indexDir), 2, mid, end, old[1])
	s = openStore(t, dir, testOptions())
	defer s.Close()
	s.index.mu.RLock() // indexLoop may be retaining runs meanwhile
	var formats []int
	for _, r := range s.index.runs {
		formats = append(formats, r.format)
	}
	s.index.mu.RUnlock()
	if s.index.end.Load() != end || !slices.Equal(formats, []int{1, 2}) {
		t.Fatalf("the older runs were not kept: index end %d (log %d), formats %v", s.index.end.Load(), end, formats)
	}
	appendAll(t, s, encodeKeyed(t, "orders", "new-1", "okey-3", 0))
	s.index.mu.Lock()
	s.index.spillLocked() // new-1 in a run of format 3
	s.index.mu.Unlock()
	for _, id := range []string{"old-0", "old-123", "old-299", "old-300", "old-599", "new-1"} {
		fs, err := s.Lookup().ByID(id)
		if got := foundIDs(t, fs, err); strings.Join(got, " ") != "orders/"+id {
			t.Fatalf("%s found %v", id, got)
		}
	}
	fs, err := s.Lookup().ByKey("okey-3")
	if got := foundIDs(t, fs, err); len(got) != 61 || got[60] != "orders/new-1" {
		t.Fatalf("okey-3 found %d: %v", len(got), got)
	}
}

// Each way a run can be damaged on disk is found at open: the run and every
// later one are dropped with a warning, the log is indexed again from
// there, and every message is still found (and nothing else).
func TestMessageIndex_DamagedRuns(t *testing.T) {
	old := indexRunEntries
	indexRunEntries = 40
	t.Cleanup(func() { indexRunEntries = old })
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	const n = 400
	for i := 0; i < n; i += 20 {
		var batch [][]byte
		for j := i; j < i+20; j++ {
			batch = append(batch, encodeKeyed(t, "orders", fmt.Sprintf("id-%d", j), fmt.Sprintf("key-%d", j%50), 0))
		}
		appendAll(t, s, batch...)
		testutil.Eventually(t, 10*time.Second, "the index to reach the log's end", func() bool {
			return s.index.end.Load() >= s.committedMessages()
		})
	}
	s.Close()
	runs := indexRuns(t, dir)
	if len(runs) < 6 {
		t.Fatalf("only %d runs", len(runs))
	}
	victim := filepath.Base(runs[len(runs)/2])
	damages := []struct {
		name, warn string
		damage     func(path string) error
	}{
		{"magic", "bad magic", func(p string) error { return patch(p, 3, 'X') }},
		{"header", "bad checksum", func(p string) error { return patch(p, 26, 0x7f) }}, // its count
		{"table", "bad checksum", func(p string) error { return patch(p, indexHeaderSize+4*100, 0x01) }},
		{"checksum", "bad checksum", func(p string) error { return patch(p, indexDataAt3-1, 0x55) }},
		{"truncated", "size", func(p string) error {
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, st.Size()-indexEntrySize3)
		}},
		{"grown", "size", func(p string) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write(make([]byte, indexEntrySize3))
			return err
		}},
		{"torn header", "EOF", func(p string) error { return os.Truncate(p, indexHeaderSize+100) }},
		{"empty", "EOF", func(p string) error { return os.Truncate(p, 0) }},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			cp := crashCopy(t, dir)
			// A temporary file a crash left is removed too.
			if err := os.WriteFile(filepath.Join(cp, indexDir, victim+".tmp"), []byte("torn"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := d.damage(filepath.Join(cp, indexDir, victim)); err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.WarnLevel)
			s, err := Open(cp, testOptions(), zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			warned := logs.FilterMessage("index run damaged: indexing again from the log").All()
			if len(warned) != 1 || !strings.Contains(fmt.Sprint(warned[0].ContextMap()["error"]), d.warn) {
				t.Fatalf("warnings %v, want one naming %q", logs.All(), d.warn)
			}
			s.index.mu.RLock()
			kept := len(s.index.runs)
			s.index.mu.RUnlock()
			if kept != len(runs)/2 {
				t.Fatalf("%d runs kept, want the %d before the damaged one", kept, len(runs)/2)
			}
			if _, err := os.Stat(filepath.Join(cp, indexDir, victim+".tmp")); !os.IsNotExist(err) {
				t.Fatalf("the temporary file is still there: %v", err)
			}
			for i := 0; i < n; i += 7 {
				fs, err := s.Lookup().ByID(fmt.Sprintf("id-%d", i))
				if got := foundIDs(t, fs, err); strings.Join(got, " ") != fmt.Sprintf("orders/id-%d", i) {
					t.Fatalf("id-%d found %v", i, got)
				}
			}
			fs, err := s.Lookup().ByKey("key-17")
			if got := foundIDs(t, fs, err); len(got) != n/50 {
				t.Fatalf("key-17 found %d: %v", len(got), got)
			}
		})
	}
}

// patch sets the byte at off of the file at path to b (xor-ed in when it
// is b already, so that it changes).
func patch(path string, off int64, b byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var cur [1]byte
	if _, err := f.ReadAt(cur[:], off); err != nil {
		return err
	}
	if cur[0] == b {
		b ^= 0xff
	}
	_, err = f.WriteAt([]byte{b}, off)
	return err
}

// A run that cannot be read at lookup time (an entry damaged, which open
// does not read, or the file cut under the open store, as a failing disk
// reads) fails the lookups that need it with ErrIndexRead instead of
// leaving its messages out, and is built again from the log: then every
// message is found again and the run on disk is whole.
func TestMessageIndex_UnreadableRunRebuilt(t *testing.T) {
	old := indexRunEntries
	indexRunEntries = 40
	t.Cleanup(func() { indexRunEntries = old })
	for _, damage := range []string{"entry", "cut"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, testOptions())
			defer func() { s.Close() }()
			for i := 0; i < 200; i += 20 {
				var batch [][]byte
				for j := i; j < i+20; j++ {
					batch = append(batch, encodeKeyed(t, "orders", fmt.Sprintf("id-%d", j), "", 0))
				}
				appendAll(t, s, batch...)
				testutil.Eventually(t, 10*time.Second, "the index to reach the log's end", func() bool {
					return s.index.end.Load() >= s.committedMessages()
				})
			}
			runs := indexRuns(t, dir)
			if len(runs) < 3 {
				t.Fatalf("only %d runs", len(runs))
			}
			whole, err := os.ReadFile(runs[0])
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "entry":
				// Every entry's offset: whichever bucket a lookup reads is damaged.
				s.Close()
				for p := indexDataAt3 + 4; p < len(whole); p += indexEntrySize3 {
					if err := patch(runs[0], int64(p), whole[p]^0x40); err != nil {
						t.Fatal(err)
					}
				}
				s = openStore(t, dir, testOptions())
			case "cut":
				if err := os.Truncate(runs[0], indexDataAt3); err != nil {
					t.Fatal(err)
				}
			}
			// id-0..39 are in the first run.
			failed := 0
			for i := range 40 {
				fs, err := s.Lookup().ByID(fmt.Sprintf("id-%d", i))
				switch {
				case errors.Is(err, ErrIndexRead):
					failed++
				case err != nil || len(fs) != 1:
					t.Fatalf("id-%d with its run damaged: %d found, %v", i, len(fs), err)
				}
			}
			if failed == 0 {
				t.Fatal("no lookup failed with its run damaged")
			}
			testutil.Eventually(t, 10*time.Second, "the run built again", func() bool {
				for i := range 200 {
					if fs, err := s.Lookup().ByID(fmt.Sprintf("id-%d", i)); err != nil || len(fs) != 1 {
						return false
					}
				}
				return true
			})
			if b, err := os.ReadFile(runs[0]); err != nil || !slices.Equal(b, whole) {
				t.Fatalf("the run built again differs from the one first written (%d bytes against %d), %v", len(b), len(whole), err)
			}
		})
	}
}
