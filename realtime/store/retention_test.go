package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func retentionOptions(clock *testClock) Options {
	o := testOptions()
	o.SegmentSize = 1 << 20
	o.Limits.MaxBody = 64 << 10
	o.Limits.MaxPropertyBytes = 64 << 10
	o = withLimits(o)
	o.ConsumeSegmentEntries = 16
	o.Clock = clock.Now
	return o
}

// fill appends 8 KiB messages until the log has n segments.
func fill(t *testing.T, s *Store, subject string, segments int, clock *testClock) int {
	t.Helper()
	i := 0
	for len(s.msgLog.Segments()) < segments {
		appendAll(t, s, encode(t, subject, fmt.Sprint(subject, i), make([]byte, 8<<10)))
		clock.Add(time.Second)
		i++
	}
	return i
}

func TestRetentionByAge(t *testing.T) {
	clock := newTestClock()
	opts := retentionOptions(clock)
	opts.RetentionAge = time.Hour
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	pull(t, s, PullRequest{Subject: "a", Group: "slow", Consumer: "c", Earliest: true})
	n := fill(t, s, "a", 3, clock)
	if rep, err := s.runRetention(); err != nil || rep.Segments != 0 {
		t.Fatalf("young log lost %d segments, %v", rep.Segments, err)
	}
	clock.Add(2 * time.Hour)
	// Stats show what the pass will drop before any group consumed it.
	st := s.Stats()
	if st.RetentionBoundary != s.msgLog.Segments()[2].Base {
		t.Fatalf("boundary %d", st.RetentionBoundary)
	}
	drop := st.Subjects[0].RetentionDropSeq
	if st.Groups[0].AtRisk != drop || drop == 0 {
		t.Fatalf("at risk %d, drop seq %d", st.Groups[0].AtRisk, drop)
	}
	rep, err := s.runRetention()
	if err != nil || rep.Segments != 2 {
		t.Fatalf("deleted %d, %v", rep.Segments, err)
	}
	// The active segment is never deleted.
	clock.Add(100 * time.Hour)
	if rep, _ := s.runRetention(); rep.Segments != 0 {
		t.Fatalf("active segment deleted")
	}
	st = s.Stats()
	if st.Subjects[0].MinSeq != drop || st.Subjects[0].NextSeq != int64(n) {
		t.Fatalf("subject after retention %+v", st.Subjects[0])
	}
	kept, _ := s.Read("a", drop, n)
	var want int64
	for _, m := range kept {
		want += int64(len(m.Message) + recordOverhead)
	}
	if st.Subjects[0].Bytes != want {
		t.Fatalf("bytes after retention %d, want %d", st.Subjects[0].Bytes, want)
	}
	r := pull(t, s, PullRequest{Subject: "a", Group: "slow", Consumer: "c", Max: 1000})
	if r.Expired != drop || r.Messages[0].ConsumeSeq != drop || int64(len(r.Messages)) != int64(n)-drop {
		t.Fatalf("pull after retention: expired %d first %d count %d", r.Expired, r.Messages[0].ConsumeSeq, len(r.Messages))
	}
}

func TestRetentionBySize(t *testing.T) {
	clock := newTestClock()
	opts := retentionOptions(clock)
	opts.RetentionBytes = 2 << 20
	dir := t.TempDir()
	s := openStore(t, dir, opts)
	fill(t, s, "a", 5, clock)
	pull(t, s, PullRequest{Subject: "b", Group: "g", Consumer: "c"})
	rep, err := s.runRetention()
	if err != nil || rep.Segments != 3 {
		t.Fatalf("deleted %d, %v", rep.Segments, err)
	}
	if st := s.Stats(); st.MessageLogBytes > 2<<20 {
		t.Fatalf("log still %d bytes", st.MessageLogBytes)
	}
	min := s.Stats().Subjects[0].MinSeq
	s.Close()
	// Retention survives a restart.
	s = openStore(t, dir, opts)
	defer s.Close()
	got, err := s.Read("a", 0, 10)
	if err != nil || got[0].ConsumeSeq != min {
		t.Fatalf("after reopen first %d, min %d, %v", got[0].ConsumeSeq, min, err)
	}
}

// TestCheckpointTrimsLogs: a checkpoint deletes action-log segments before
// its offset and pull-log segments wholly acked.
func TestCheckpointTrimsLogs(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.ActionSegmentSize = 256 << 10
	opts.PullSegmentEntries = 64
	s := openStore(t, dir, opts)
	defer func() { s.Close() }()
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c"})
	appendN(t, s, "a", "m", 12000)
	known := int64(-1)
	for {
		r, err := s.Pull(PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 2, KnownPullSeq: known})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) == 0 {
			break
		}
		known = r.Messages[len(r.Messages)-1].PullSeq
		ack(t, s, "a", "g", "c", r.Messages[0].PullSeq, known)
	}
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	before := len(s.actLog.Segments())
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if after := len(s.actLog.Segments()); before < 3 || after != 1 {
		t.Fatalf("action-log segments %d -> %d", before, after)
	}
	files, err := os.ReadDir(filepath.Join(dir, "pulllog", dirName("a"), dirName("g"), dirName("c")))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) > 1 {
		t.Fatalf("%d pull-log files kept after everything was acked", len(files))
	}
	s.Close()
	s = openStore(t, dir, opts)
	if g := s.Stats().Groups[0]; g.Cursor != 12000 || g.Consumers[0].AckSeq != 11999 {
		t.Fatalf("after reopen %+v", g)
	}
}
