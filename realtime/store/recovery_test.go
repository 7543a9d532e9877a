package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/qmq-go/qmq/pkg/segment"
)

func segFile(dir, log string, base int64) string {
	return filepath.Join(dir, log, segment.FileName(base))
}

// lastSegment returns the path and base of a log's last segment.
func lastSegment(t *testing.T, dir, log string) (string, int64) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, log))
	if err != nil {
		t.Fatal(err)
	}
	var base int64 = -1
	for _, e := range entries {
		if b, ok := segment.ParseFileName(e.Name()); ok && b > base {
			base = b
		}
	}
	return segFile(dir, log, base), base
}

func mutate(t *testing.T, path string, fn func([]byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readIDs(t *testing.T, s *Store, subject string) []string {
	t.Helper()
	got, err := s.Read(subject, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return ids(t, got)
}

// TestTornMessageTail cuts the last record of the message log at every kind
// of boundary (inside the header, inside the payload, one byte short, and
// with garbage instead of zeros) and checks that recovery keeps exactly the
// complete records and the consume log agrees.
func TestTornMessageTail(t *testing.T) {
	src := t.TempDir()
	s := openStore(t, src, testOptions())
	defer s.Close()
	appendN(t, s, "a", "m", 20)
	res := appendAll(t, s, encode(t, "a", "last", bytes.Repeat([]byte{0x77}, 100)))
	last := res[0]
	size := int64(recordOverhead + len(encode(t, "a", "last", bytes.Repeat([]byte{0x77}, 100))))
	for _, cut := range []int64{0, 1, 5, 11, 12, 20, 27, 28, 60, size - 1} {
		for _, garbage := range []bool{false, true} {
			dir := crashCopy(t, src)
			path, base := lastSegment(t, dir, "messagelog")
			mutate(t, path, func(b []byte) {
				from := last.Offset - base + cut
				for i := from; i < last.Offset-base+size; i++ {
					if garbage {
						b[i] = 0xA5
					} else {
						b[i] = 0
					}
				}
			})
			s2 := openStore(t, dir, testOptions())
			got := readIDs(t, s2, "a")
			if len(got) != 20 || got[19] != "m-19" {
				t.Fatalf("cut %d garbage %v: %d messages", cut, garbage, len(got))
			}
			if rep := s2.Stats().Open; cut > 0 || garbage {
				if rep.TornMessageTail != last.Offset {
					t.Fatalf("cut %d: torn tail at %d, want %d", cut, rep.TornMessageTail, last.Offset)
				}
			}
			r := appendAll(t, s2, encode(t, "a", "again", nil))
			if r[0].Seq != 20 || r[0].Offset != last.Offset {
				t.Fatalf("cut %d: next append seq %d at %d", cut, r[0].Seq, r[0].Offset)
			}
			s2.Close()
		}
	}
}

// TestTornAcrossSegments kills a log whose tail spans a segment roll: the
// last segment holds a torn first record.
func TestTornAcrossSegments(t *testing.T) {
	src := t.TempDir()
	opts := testOptions()
	opts.SegmentSize = 1 << 20
	opts.Limits.MaxBody = 64 << 10
	opts.Limits.MaxPropertyBytes = 64 << 10
	opts = withLimits(opts)
	s := openStore(t, src, opts)
	defer s.Close()
	var n int
	for len(s.msgLog.Segments()) < 2 {
		appendAll(t, s, encode(t, "a", "m"+itoa(n), make([]byte, 30000)))
		n++
	}
	dir := crashCopy(t, src)
	path, _ := lastSegment(t, dir, "messagelog")
	mutate(t, path, func(b []byte) { b[20] ^= 0xFF }) // the first record of the new segment
	s2 := openStore(t, dir, opts)
	defer s2.Close()
	if got := readIDs(t, s2, "a"); len(got) != n-1 {
		t.Fatalf("%d messages, want %d", len(got), n-1)
	}
}

func withLimits(o Options) Options {
	if o.Limits.MaxSubject == 0 {
		l := DefaultOptions.Limits
		l.MaxBody, l.MaxPropertyBytes = o.Limits.MaxBody, o.Limits.MaxPropertyBytes
		o.Limits = l
	}
	return o
}

func itoa(i int) string {
	return string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
}

// TestCorruptMiddle damages a record in the middle of the message log. Found
// by recovery: Open fails naming the range unless SkipCorrupt, which skips
// it. Before the checkpoint: the message is never served.
func TestCorruptMiddle(t *testing.T) {
	src := t.TempDir()
	s := openStore(t, src, testOptions())
	defer s.Close()
	appendN(t, s, "a", "m", 5)
	victim := appendAll(t, s, encode(t, "a", "victim", []byte("v")))[0]
	appendN(t, s, "a", "n", 5)
	appendN(t, s, "b", "x", 3)

	dir := crashCopy(t, src)
	os.Remove(filepath.Join(dir, checkpointName))
	path, base := lastSegment(t, dir, "messagelog")
	mutate(t, path, func(b []byte) { b[victim.Offset-base+recordOverhead+3] ^= 0x01 })
	if _, err := Open(dir, testOptions(), nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v", err)
	}
	opts := testOptions()
	opts.SkipCorrupt = true
	s2 := openStore(t, dir, opts)
	got := readIDs(t, s2, "a")
	if len(got) != 10 || got[5] != "n-0" {
		t.Fatalf("after skip: %v", got)
	}
	if st := s2.Stats(); st.CorruptRanges != 1 {
		t.Fatalf("corrupt ranges %d", st.CorruptRanges)
	}
	if len(readIDs(t, s2, "b")) != 3 {
		t.Fatal("subject b lost messages")
	}
	s2.Close()

	// Damage before the checkpoint: found when read, never served.
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	dir = crashCopy(t, src)
	path, base = lastSegment(t, dir, "messagelog")
	mutate(t, path, func(b []byte) { b[victim.Offset-base+recordOverhead+3] ^= 0x01 })
	s3 := openStore(t, dir, testOptions())
	defer s3.Close()
	got = readIDs(t, s3, "a")
	if len(got) != 10 {
		t.Fatalf("read %d", len(got))
	}
	for _, id := range got {
		if id == "victim" {
			t.Fatal("a corrupt message was served")
		}
	}
	r := pull(t, s3, PullRequest{Subject: "a", Group: "g", Consumer: "c", Earliest: true, Max: 100})
	if len(r.Messages) != 10 || s3.Stats().CorruptReads == 0 {
		t.Fatalf("pull %d, corrupt reads %d", len(r.Messages), s3.Stats().CorruptReads)
	}
}

// TestDerivedLogsRebuilt damages what can be rebuilt: the checkpoint, the
// consume logs after the checkpoint, the action log's tail.
func TestDerivedLogsRebuilt(t *testing.T) {
	src := t.TempDir()
	s := openStore(t, src, testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c"})
	appendN(t, s, "a", "m", 40)
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 7})
	ack(t, s, "a", "g", "c", 0, 3)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "a", "n", 10)
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 5, KnownPullSeq: 6})
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	want := readIDs(t, s, "a")
	wantGroups := stripSeen(s.Stats().Groups)

	t.Run("checkpoint garbage", func(t *testing.T) {
		dir := crashCopy(t, src)
		mutate(t, filepath.Join(dir, checkpointName), func(b []byte) { b[len(b)/2] ^= 0xFF })
		s2 := openStore(t, dir, testOptions())
		defer s2.Close()
		if got := readIDs(t, s2, "a"); len(got) != len(want) {
			t.Fatalf("%d messages", len(got))
		}
		if g := stripSeen(s2.Stats().Groups); len(g) != 1 || g[0].Cursor != wantGroups[0].Cursor || g[0].Consumers[0] != wantGroups[0].Consumers[0] {
			t.Fatalf("groups %+v want %+v", g, wantGroups)
		}
	})
	t.Run("consume log deleted", func(t *testing.T) {
		dir := crashCopy(t, src)
		os.RemoveAll(filepath.Join(dir, "consumelog"))
		os.Remove(filepath.Join(dir, checkpointName))
		s2 := openStore(t, dir, testOptions())
		defer s2.Close()
		if got := readIDs(t, s2, "a"); len(got) != len(want) {
			t.Fatalf("%d messages", len(got))
		}
	})
	t.Run("consume log garbage after checkpoint", func(t *testing.T) {
		dir := crashCopy(t, src)
		path, _ := lastSegment(t, filepath.Join(dir, "consumelog"), dirName("a"))
		mutate(t, path, func(b []byte) {
			for i := 40 * entryWidth; i < len(b); i++ {
				b[i] = 0x5A
			}
		})
		s2 := openStore(t, dir, testOptions())
		defer s2.Close()
		if got := readIDs(t, s2, "a"); len(got) != len(want) || got[45] != "n-5" {
			t.Fatalf("%d messages", len(got))
		}
	})
	t.Run("action log torn", func(t *testing.T) {
		dir := crashCopy(t, src)
		path, _ := lastSegment(t, dir, "actionlog")
		end := s.actLog.End()
		mutate(t, path, func(b []byte) { b[end-3] ^= 0xFF }) // the last action: the second pull
		s2 := openStore(t, dir, testOptions())
		defer s2.Close()
		if rep := s2.Stats().Open; rep.TornActionTail < 0 {
			t.Fatal("torn action tail not reported")
		}
		g := s2.Stats().Groups[0]
		if g.Cursor != 7 || g.Consumers[0].PullSeq != 7 || g.Consumers[0].AckSeq != 3 {
			t.Fatalf("group after torn action: %+v", g)
		}
	})
}

// TestReplayBoundsActions writes action records that no live action
// writes, with valid CRCs, to a real action log and replays them: a pull
// naming 2^32-1 entries (written to the pull log as named, it took 32 GiB)
// and a return naming as many (more than returnChunk) are skipped as
// corrupt, and a void of more pull sequences than a live
// pull or ack may void (a range that SkipCorrupt skipped leaves such a
// gap) is replayed a chunk at a time.
func TestReplayBoundsActions(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	defer s.Close()
	appendN(t, s, "a", "m", 20)
	if got := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 7, Earliest: true}); len(got.Messages) != 7 {
		t.Fatalf("pulled %d messages", len(got.Messages))
	}
	v := s.groups[groupKey{subject: "a", group: "g"}].version
	p := encodeActionHead(nil, actPull, false, "a", "g", "c", v+1)
	p = appendInt64(p, 7)                   // first pull seq
	p = binary.BigEndian.AppendUint32(p, 0) // taken
	p = appendInt64(p, 20)                  // cursor
	p = appendRuns(p, []run{{start: 7, count: math.MaxUint32}})
	if err := s.actions.append(actPull, p); err != nil {
		t.Fatal(err)
	}
	next := int64(7 + maxVoid + 5000)
	if err := s.actions.append(actVoid, appendInt64(encodeActionHead(nil, actVoid, false, "a", "g", "c", v+2), next)); err != nil {
		t.Fatal(err)
	}
	p = appendInt64(encodeActionHead(nil, actReturn, false, "a", "g", "c", v+3), 6)
	p = appendRuns(p, []run{{start: 0, count: math.MaxUint32}})
	if err := s.actions.append(actReturn, p); err != nil {
		t.Fatal(err)
	}
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, crashCopy(t, dir), testOptions())
	defer s2.Close()
	g := s2.Stats().Groups[0]
	if g.Cursor != 7 || g.Consumers[0].PullSeq != next || g.Returned != 0 {
		t.Fatalf("group after replay: cursor %d, pull seq %d, %d returned; want 7 (the pull skipped), %d (the void applied) and 0 (the return skipped)",
			g.Cursor, g.Consumers[0].PullSeq, g.Returned, next)
	}
	// The next pull of a consumer holding every pull sequence before the
	// void's end gets the entries the skipped pull named, past the void.
	res := pull(t, s2, PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 5, KnownPullSeq: next - 1})
	if len(res.Messages) != 5 || res.Messages[0].ConsumeSeq != 7 || res.Messages[0].PullSeq != next {
		t.Fatalf("pull after replay: %d messages, first consume seq %d pull seq %d", len(res.Messages), res.Messages[0].ConsumeSeq, res.Messages[0].PullSeq)
	}
}

// TestCrashAtBoundaries: a crash between writing checkpoint.tmp and renaming
// it, and a crash right after creating a new segment file.
func TestCrashAtBoundaries(t *testing.T) {
	src := t.TempDir()
	s := openStore(t, src, testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c"})
	appendN(t, s, "a", "m", 10)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "a", "n", 5)
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		crash func(dir string)
	}{
		{"half-written checkpoint.tmp", func(dir string) {
			os.WriteFile(filepath.Join(dir, checkpointName+".tmp"), []byte("QCKP garbage"), 0o644)
		}},
		{"empty new message segment", func(dir string) {
			_, base := lastSegment(t, dir, "messagelog")
			os.WriteFile(segFile(dir, "messagelog", base+testOptions().SegmentSize), nil, 0o644)
		}},
		{"zeroed new action segment", func(dir string) {
			_, base := lastSegment(t, dir, "actionlog")
			os.WriteFile(segFile(dir, "actionlog", base+testOptions().ActionSegmentSize), make([]byte, 4096), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := crashCopy(t, src)
			tc.crash(dir)
			s2 := openStore(t, dir, testOptions())
			defer s2.Close()
			if got := readIDs(t, s2, "a"); len(got) != 15 {
				t.Fatalf("%d messages", len(got))
			}
			r := appendAll(t, s2, encode(t, "a", "after", nil))
			if r[0].Seq != 15 {
				t.Fatalf("next seq %d", r[0].Seq)
			}
			if got := pull(t, s2, PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 100}); len(got.Messages) != 16 {
				t.Fatalf("pulled %d", len(got.Messages))
			}
		})
	}
}
