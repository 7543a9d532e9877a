package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// replicate copies everything committed in m into r the way a slave does,
// in chunks of at most chunk bytes, until r has m's committed ends.
func replicate(t *testing.T, m, r *Store, chunk int) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("replication does not converge")
		}
		mEnd, aEnd := r.CommittedEnds()
		mc, err := m.Source().ReadMessageLog(mEnd, chunk)
		if err != nil {
			t.Fatalf("read message log at %d: %v", mEnd, err)
		}
		if err := r.Replica().ReplicateMessages(mc); err != nil {
			t.Fatalf("replicate messages at %d: %v", mc.Offset, err)
		}
		ac, err := m.Source().ReadActionLog(aEnd, chunk)
		if err != nil {
			t.Fatalf("read action log at %d: %v", aEnd, err)
		}
		if err := r.Replica().ReplicateActions(ac); err != nil {
			t.Fatalf("replicate actions at %d: %v", ac.Offset, err)
		}
		if len(mc.Data) == 0 && len(ac.Data) == 0 && mc.Offset == mc.End && ac.Offset == ac.End {
			return
		}
	}
}

// replicaState is what must be the same on a master and its replica.
type replicaState struct {
	Start    int64
	End      int64
	Subjects []SubjectStats
	Groups   []GroupStats
}

func stateOf(s *Store) replicaState {
	st := s.Stats()
	for i := range st.Groups {
		// A consumer that never got an entry has no state in the action
		// log (nothing to lose): only the master's memory knows it.
		var cs []ConsumerStats
		for _, c := range st.Groups[i].Consumers {
			if c.PullSeq > 0 || c.AckSeq >= 0 {
				c.LastSeen = time.Time{}
				cs = append(cs, c)
			}
		}
		st.Groups[i].Consumers = cs
		st.Groups[i].AtRisk = 0
	}
	for i := range st.Subjects {
		st.Subjects[i].RetentionDropSeq = 0
	}
	return replicaState{Start: st.MessageLogStart, End: st.MessageLogEnd, Subjects: st.Subjects, Groups: st.Groups}
}

func replicaOptions() Options {
	o := testOptions()
	o.SegmentSize = 64 << 10
	o.ActionSegmentSize = 256 << 10
	o.Limits.MaxBody = 16 << 10
	o.Limits.MaxPropertyBytes = 16 << 10
	return withLimits(o)
}

// openReplica opens a replica store with opts (its file system fsys when
// not nil) in a temporary directory, closed when the test ends.
func openReplica(t *testing.T, opts Options, fsys fsutil.FS) *Store {
	t.Helper()
	opts.Replica = true
	if fsys != nil {
		opts.FS = fsys
	}
	r := openStore(t, t.TempDir(), opts)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestReplicaFollowsMasterAcrossSegments(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	ropts := opts
	ropts.Replica = true
	rdir := t.TempDir()
	r := openStore(t, rdir, ropts)

	body := make([]byte, 700)
	for round := 0; round < 4; round++ {
		for i := 0; i < 60; i++ {
			appendAll(t, m, encode(t, fmt.Sprintf("s%d", i%3), fmt.Sprintf("r%d-%d", round, i), body, "t"))
		}
		for k := 0; k < 3; k++ {
			res, err := m.Pull(PullRequest{Subject: fmt.Sprintf("s%d", k), Group: "g", Consumer: "c1", Max: 15, KnownPullSeq: -1, Earliest: true})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(res.Messages); n > 0 {
				if _, err := m.Ack(AckRequest{Subject: fmt.Sprintf("s%d", k), Group: "g", Consumer: "c1", First: res.Messages[0].PullSeq, Last: res.Messages[n/2].PullSeq}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := m.Checkpoint(); err != nil { // flushes the action log
			t.Fatal(err)
		}
		replicate(t, m, r, 5000)
		if got, want := stateOf(r), stateOf(m); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: replica differs:\n got %+v\nwant %+v", round, got, want)
		}
	}
	if segs := len(m.msgLog.Segments()); segs < 3 {
		t.Fatalf("test needs several segments, master has %d", segs)
	}
	// A replica refuses clients.
	if _, err := r.Append(t.Context(), [][]byte{encode(t, "s0", "x", nil)}); !errors.Is(err, ErrReplica) {
		t.Fatalf("append on a replica: %v", err)
	}
	if _, err := r.Pull(PullRequest{Subject: "s0", Group: "g", Consumer: "c1", Max: 1}); !errors.Is(err, ErrReplica) {
		t.Fatalf("pull on a replica: %v", err)
	}
	// Reopened, the replica recovers the same state from its own files.
	want := stateOf(m)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openStore(t, rdir, ropts)
	defer r.Close()
	if got := stateOf(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("reopened replica differs:\n got %+v\nwant %+v", got, want)
	}
	// The replica's messages are the master's, byte for byte.
	for k := 0; k < 3; k++ {
		subj := fmt.Sprintf("s%d", k)
		a, err := m.Read(subj, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Read(subj, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) || len(a) != 80 {
			t.Fatalf("%s: master has %d messages, replica %d", subj, len(a), len(b))
		}
		for i := range a {
			if string(a[i].Message) != string(b[i].Message) {
				t.Fatalf("%s message %d differs", subj, i)
			}
		}
	}
}

func TestReplicaCatchesUpAfterRetention(t *testing.T) {
	opts := replicaOptions()
	opts.RetentionBytes = 3 * opts.SegmentSize
	opts.RetentionAge = -1
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	body := make([]byte, 900)
	for i := 0; i < 400; i++ {
		appendAll(t, m, encode(t, "s", fmt.Sprintf("m%d", i), body))
	}
	if _, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 10, KnownPullSeq: -1}); err != nil {
		t.Fatal(err)
	}
	rep, err := m.runRetention()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Start == 0 {
		t.Fatal("retention deleted nothing")
	}
	if err := m.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	r := openReplica(t, opts, nil)
	replicate(t, m, r, 1<<20)
	if got, want := stateOf(r), stateOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica differs:\n got %+v\nwant %+v", got, want)
	}
	if got := stateOf(r).Start; got != rep.Start {
		t.Fatalf("replica starts at %d, master at %d", got, rep.Start)
	}
}

func TestReadLogRejectsBadOffsets(t *testing.T) {
	m := openStore(t, t.TempDir(), replicaOptions())
	defer m.Close()
	appendAll(t, m, encode(t, "s", "a", []byte("hello")), encode(t, "s", "b", []byte("world")))
	end, _ := m.CommittedEnds()
	if _, err := m.Source().ReadMessageLog(end+1, 1<<20); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("read past the end: %v", err)
	}
	if _, err := m.Source().ReadMessageLog(-5, 1<<20); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("negative offset: %v", err)
	}
	if _, err := m.Source().ReadMessageLog(3, 1<<20); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("offset inside a record: %v", err)
	}
	c, err := m.Source().ReadMessageLog(0, 1<<20)
	if err != nil || c.Offset != 0 || int64(len(c.Data)) != end || c.End != end {
		t.Fatalf("read from 0: %+v, %v", c, err)
	}
	// A chunk of garbage or one that does not continue the copy is refused
	// and changes nothing.
	ropts := replicaOptions()
	ropts.Replica = true
	r := openStore(t, t.TempDir(), ropts)
	defer r.Close()
	bad := c
	bad.Data = append([]byte(nil), c.Data...)
	bad.Data[20] ^= 0xff
	if err := r.Replica().ReplicateMessages(bad); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("garbage chunk: %v", err)
	}
	skipped := c
	skipped.Offset, skipped.Start = 100, 0
	if err := r.Replica().ReplicateMessages(skipped); !errors.Is(err, ErrBadChunk) && !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("misplaced chunk: %v", err)
	}
	if e, _ := r.CommittedEnds(); e != 0 {
		t.Fatalf("refused chunks moved the replica to %d", e)
	}
	if err := r.Replica().ReplicateMessages(c); err != nil {
		t.Fatal(err)
	}
	// The same for actions: a chunk that would land elsewhere is refused
	// before anything is appended.
	if _, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 2, KnownPullSeq: -1, Earliest: true}); err != nil {
		t.Fatal(err)
	}
	if err := m.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	ac, err := m.Source().ReadActionLog(0, 1<<20)
	if err != nil || len(ac.Data) == 0 {
		t.Fatalf("read action log: %+v, %v", ac, err)
	}
	misplaced := ac
	misplaced.Offset, misplaced.End = 100, ac.End+100
	if err := r.Replica().ReplicateActions(misplaced); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("misplaced action chunk: %v", err)
	}
	if _, a := r.CommittedEnds(); a != 0 || r.actions.end() != 0 {
		t.Fatalf("a refused action chunk moved the replica to %d", a)
	}
	if err := r.Replica().ReplicateActions(ac); err != nil {
		t.Fatal(err)
	}
	if got, want := stateOf(r), stateOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica differs:\n got %+v\nwant %+v", got, want)
	}
	if err := m.Replica().ReplicateMessages(c); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("replicate into a master: %v", err)
	}
}

// Any chunk a replica is handed either replicates or fails without moving
// the replica's ends, and never panics.
func FuzzReplicaChunks(f *testing.F) {
	opts := replicaOptions()
	m, err := Open(f.TempDir(), opts, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	var msgs [][]byte
	for i := 0; i < 3; i++ {
		msgs = append(msgs, encode(f, "s", fmt.Sprint(i), []byte("fuzz")))
	}
	if _, err := m.Append(f.Context(), msgs); err != nil {
		f.Fatal(err)
	}
	if _, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 2, KnownPullSeq: -1, Earliest: true}); err != nil {
		f.Fatal(err)
	}
	if err := m.Checkpoint(); err != nil {
		f.Fatal(err)
	}
	mc, _ := m.Source().ReadMessageLog(0, 1<<20)
	ac, _ := m.Source().ReadActionLog(0, 1<<20)
	f.Add(mc.Data, true)
	f.Add(ac.Data, false)
	ropts := opts
	ropts.Replica = true
	r, err := Open(f.TempDir(), ropts, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer r.Close()
	f.Fuzz(func(t *testing.T, data []byte, messages bool) {
		me, ae := r.CommittedEnds()
		var err error
		if messages {
			err = r.Replica().ReplicateMessages(LogChunk{Offset: me, End: me + int64(len(data)), Data: data})
		} else {
			err = r.Replica().ReplicateActions(LogChunk{Offset: ae, End: ae + int64(len(data)), Data: data})
		}
		if err != nil {
			if me2, ae2 := r.CommittedEnds(); me2 != me || ae2 != ae {
				t.Fatalf("a refused chunk moved the replica from %d/%d to %d/%d: %v", me, ae, me2, ae2, err)
			}
		}
	})
}

// Under FlushAsync only what an fdatasync covered is served to a slave.
func TestReadLogServesOnlyDurableBytes(t *testing.T) {
	opts := replicaOptions()
	opts.Flush = FlushAsync
	opts.FlushInterval = time.Hour
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	appendAll(t, m, encode(t, "s", "a", []byte("not yet durable")))
	if e, _ := m.CommittedEnds(); e != 0 {
		t.Fatalf("committed end %d before any fdatasync", e)
	}
	if c, err := m.Source().ReadMessageLog(0, 1<<20); err != nil || len(c.Data) != 0 {
		t.Fatalf("served %d bytes before any fdatasync (%v)", len(c.Data), err)
	}
	if err := m.Checkpoint(); err != nil { // syncs the message log
		t.Fatal(err)
	}
	if c, err := m.Source().ReadMessageLog(0, 1<<20); err != nil || len(c.Data) == 0 || c.End != m.goodEnd.Load() {
		t.Fatalf("after the sync: %+v, %v", c, err)
	}
}

// A promoted replica takes writes where its copy ends: sequences, offsets,
// consumers' positions and append times continue, and a new replica can
// follow it from empty.
func TestPromotedReplicaContinues(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	for i := 0; i < 30; i++ {
		appendAll(t, m, encode(t, "s", fmt.Sprint("m", i), make([]byte, 3000)))
	}
	res, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 10, KnownPullSeq: -1, Earliest: true})
	if err != nil || len(res.Messages) != 10 {
		t.Fatalf("pull: %d, %v", len(res.Messages), err)
	}
	if _, err := m.Ack(AckRequest{Subject: "s", Group: "g", Consumer: "c", First: 0, Last: 9}); err != nil {
		t.Fatal(err)
	}
	if err := m.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	r := openReplica(t, opts, nil)
	replicate(t, m, r, 1<<20)
	mEnd, _ := m.CommittedEnds()

	if err := r.Replica().Promote(); err != nil {
		t.Fatal(err)
	}
	if r.Replica().Active() {
		t.Fatal("promoted store still a replica")
	}
	if err := r.Replica().Promote(); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("second promote: %v", err)
	}
	if err := r.Replica().ReplicateMessages(LogChunk{Offset: mEnd, End: mEnd}); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("replicate into a promoted store: %v", err)
	}
	got := appendAll(t, r, encode(t, "s", "after", []byte("x")))
	if got[0].Seq != 30 || got[0].Offset != mEnd {
		t.Fatalf("first append after promotion: seq %d at %d, want seq 30 at %d", got[0].Seq, got[0].Offset, mEnd)
	}
	res, err = r.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 100, KnownPullSeq: 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 21 || res.Messages[0].PullSeq != 10 || res.Messages[0].ConsumeSeq != 10 || res.Messages[20].ConsumeSeq != 30 {
		t.Fatalf("consumer after promotion got %d messages from pull seq %d", len(res.Messages), res.Messages[0].PullSeq)
	}
	if err := r.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	r2 := openReplica(t, opts, nil)
	replicate(t, r, r2, 1<<20)
	if a, b := stateOf(r2), stateOf(r); !reflect.DeepEqual(a, b) {
		t.Fatalf("replica of the promoted store differs:\n got %+v\nwant %+v", a, b)
	}
}

// Checkpoints keep the action-log segments a slave has not copied
// (ActionLogFloor) and delete them once it has.
func TestCheckpointKeepsActionsForSlave(t *testing.T) {
	opts := replicaOptions()
	floor := int64(0)
	opts.ActionLogFloor = func() int64 { return floor }
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	appendN(t, m, "s", "m", 200)
	// Many small pulls and acks: several action-log segments.
	for i := 0; len(m.actLog.Segments()) < 3; i++ {
		c := fmt.Sprint("c", i%50)
		res, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: c, Max: 1, KnownPullSeq: -1, Earliest: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) > 0 {
			if _, err := m.Ack(AckRequest{Subject: "s", Group: "g", Consumer: c, First: res.Messages[0].PullSeq, Last: res.Messages[0].PullSeq}); err != nil {
				t.Fatal(err)
			}
		} else if _, err := m.ResetGroup("s", "g", ResetEarliest, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			if err := m.actions.flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if start := m.actLog.Start(); start != 0 {
		t.Fatalf("checkpoint deleted action-log segments below %d that the slave (at 0) lacks", start)
	}
	floor = -1 // no slave
	if err := m.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if start := m.actLog.Start(); start == 0 {
		t.Fatal("checkpoint without a slave kept every action-log segment")
	}
}

// replicateTail copies m into r the way a slave does since tentative
// tails: message chunks up to m's written end, whatever m has made
// durable. It returns the cut generation m had before the reads.
func replicateTail(t *testing.T, m, r *Store, chunk int) uint64 {
	t.Helper()
	gen := m.Source().MessageCutGen()
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("replication does not converge")
		}
		from, _ := r.Replica().Ends()
		mc, err := m.Source().ReadMessageTailInto(nil, from, chunk)
		if err != nil {
			t.Fatalf("read message tail at %d: %v", from, err)
		}
		if g := m.Source().MessageCutGen(); g != gen {
			t.Fatalf("cut generation moved from %d to %d during a read", gen, g)
		}
		if err := r.Replica().ReplicateMessages(mc); err != nil {
			t.Fatalf("replicate messages at %d: %v", mc.Offset, err)
		}
		if len(mc.Data) == 0 {
			return gen
		}
	}
}

// messageLogBytes returns s's message log from its start to its written
// end (segment padding included).
func messageLogBytes(t *testing.T, s *Store) []byte {
	t.Helper()
	start, end := s.msgLog.Start(), s.msgLog.End()
	b := make([]byte, end-start)
	if err := s.msgLog.ReadAt(b, start); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplicaTailCutBack: a replica copies a master's written tail before
// the master's fdatasync, the fdatasync fails (a real failure through the
// fault file layer), the master cuts its log back and writes other records
// at the same offsets. The replica never indexes the tail it was not told
// is durable, cuts it back on the cut the master recorded, and ends byte
// for byte the master's copy.
func TestReplicaTailCutBack(t *testing.T) {
	opts := replicaOptions()
	ffs := fsutil.NewFaultFS(nil)
	mopts := opts
	mopts.FS = ffs
	m := openStore(t, t.TempDir(), mopts)
	defer m.Close()
	ropts := opts
	ropts.Replica = true
	rdir := t.TempDir()
	r := openStore(t, rdir, ropts)
	defer func() { r.Close() }()

	body := make([]byte, 500)
	for i := 0; i < 40; i++ {
		appendAll(t, m, encode(t, fmt.Sprintf("s%d", i%2), fmt.Sprintf("a%d", i), body))
	}
	gen := replicateTail(t, m, r, 3000)
	good, _ := m.CommittedEnds()
	if w, d := r.Replica().Ends(); w != good || d != good {
		t.Fatalf("replica ends (%d, %d), master committed %d", w, d, good)
	}

	// A group whose fdatasync fails: written, never durable, never acked.
	ffs.Fail(fsutil.OpSync, nil)
	var lost [][]byte
	for i := 0; i < 10; i++ {
		lost = append(lost, encode(t, "s0", fmt.Sprintf("lost%d", i), body))
	}
	res, err := m.Append(t.Context(), lost)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if !errors.Is(x.Err, ErrIO) {
			t.Fatalf("append with failing fdatasync: %v", x.Err)
		}
	}
	if m.Source().MessageTailEnd() <= good {
		t.Fatal("the failed group left no written tail to copy")
	}
	// The replica copies the tail: written and synced, not indexed.
	if g := replicateTail(t, m, r, 3000); g != gen {
		t.Fatalf("a cut before the master retried: generation %d → %d", gen, g)
	}
	tail, _ := r.Replica().Ends()
	if tail != m.Source().MessageTailEnd() {
		t.Fatalf("replica written end %d, master's tail %d", tail, m.Source().MessageTailEnd())
	}
	if c, _ := r.CommittedEnds(); c != good {
		t.Fatalf("replica indexed up to %d past the master's committed end %d", c, good)
	}
	if got, err := r.Read("s0", 20, 100); err != nil || len(got) != 0 {
		t.Fatalf("replica reads %d tentative messages (%v)", len(got), err)
	}
	before := messageLogBytes(t, r)

	// The disk heals: the next append cuts the master's log back and
	// writes other records at the same offsets.
	ffs.Heal()
	var kept [][]byte
	for i := 0; i < 15; i++ {
		kept = append(kept, encode(t, "s1", fmt.Sprintf("kept%d", i), body))
	}
	appendAll(t, m, kept...)
	g2, low := m.Source().MessageCuts(gen)
	if g2 != gen+1 || low != good {
		t.Fatalf("MessageCuts(%d) = %d, %d; want %d, %d", gen, g2, low, gen+1, good)
	}
	after := messageLogBytes(t, m)
	if bytesEqualPrefix(before, after, int(tail-good)) {
		t.Fatal("the master wrote the same bytes again: the test shows no divergence")
	}
	// Without the cut the copy would go on from its tail; with it, it
	// refetches from the cut.
	if err := r.Replica().CutTail(low); err != nil {
		t.Fatal(err)
	}
	if w, _ := r.Replica().Ends(); w != good {
		t.Fatalf("replica written end %d after the cut, want %d", w, good)
	}
	replicateTail(t, m, r, 3000)
	if got, want := messageLogBytes(t, r), messageLogBytes(t, m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica's message log (%d bytes) differs from the master's (%d bytes)", len(got), len(want))
	}
	if got, want := stateOf(r), stateOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica differs:\n got %+v\nwant %+v", got, want)
	}
	for _, subj := range []string{"s0", "s1"} {
		a, _ := m.Read(subj, 0, 1000)
		b, _ := r.Read(subj, 0, 1000)
		if len(a) != len(b) {
			t.Fatalf("%s: master has %d messages, replica %d", subj, len(a), len(b))
		}
		for i := range a {
			if a[i].ConsumeSeq != b[i].ConsumeSeq || !reflect.DeepEqual(a[i].Message, b[i].Message) {
				t.Fatalf("%s: message %d differs", subj, i)
			}
		}
	}
	// A cut below what the replica has indexed is refused (a truncation).
	if err := r.Replica().CutTail(good - 1); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("cut below the indexed end: %v", err)
	}
}

func bytesEqualPrefix(a, b []byte, n int) bool {
	return len(a) >= n && len(b) >= n && reflect.DeepEqual(a[len(a)-n:], b[len(a)-n:len(a)])
}

// TestPromoteIndexesTheTail: a replica promoted while it holds a tentative
// tail (acknowledged to the master, so possibly answered to its senders)
// serves it as its own.
func TestPromoteIndexesTheTail(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	r := openReplica(t, opts, nil)
	body := make([]byte, 300)
	var offs []int64
	for i := 0; i < 30; i++ {
		offs = append(offs, appendAll(t, m, encode(t, "p", fmt.Sprintf("m%d", i), body))[0].Offset)
	}
	// The master's chunks claim an earlier committed end: the last
	// records are a tail here.
	mc, err := m.Source().ReadMessageTailInto(nil, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	all := mc.End
	mc.End = offs[10]
	if err := r.Replica().ReplicateMessages(mc); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Read("p", 0, 100); len(got) != 10 {
		t.Fatalf("replica reads %d messages before the promotion, want the 10 below the end it was told", len(got))
	}
	if err := r.Replica().Promote(); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.CommittedEnds(); c != all {
		t.Fatalf("promoted store ends at %d, want %d", c, all)
	}
	res := appendAll(t, r, encode(t, "p", "after", body))
	if res[0].Seq != 30 || res[0].Offset != all {
		t.Fatalf("first append after the promotion: seq %d at %d, want 30 at %d", res[0].Seq, res[0].Offset, all)
	}
	if got, _ := r.Read("p", 0, 100); len(got) != 31 {
		t.Fatalf("promoted store reads %d messages, want 31", len(got))
	}
}

// readCountFS counts the reads of message-log segments.
type readCountFS struct {
	fsutil.FS
	reads atomic.Int64
}

func (f *readCountFS) OpenFile(name string, flag int, perm fs.FileMode) (fsutil.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, string(filepath.Separator)+"messagelog"+string(filepath.Separator)) {
		return file, err
	}
	return readCountFile{file, &f.reads}, nil
}

type readCountFile struct {
	fsutil.File
	reads *atomic.Int64
}

func (f readCountFile) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	return f.File.ReadAt(p, off)
}

// TestReplicaIndexesTheTailFromMemory: a replica indexes the tentative
// tail from the chunks it received, not by reading back its log: through
// a committed end that lands inside a chunk, a master's cut inside a kept
// chunk, and segment ends. It ends byte for byte and entry for entry the
// master's, reading back no more than the padding at segment ends.
func TestReplicaIndexesTheTailFromMemory(t *testing.T) {
	opts := replicaOptions()
	// The message index reads the committed log by design (msgindex.go);
	// the reads counted here are the consume-log indexing's alone.
	opts.NoMessageIndex = true
	ffs := fsutil.NewFaultFS(nil)
	mopts := opts
	mopts.FS = ffs
	m := openStore(t, t.TempDir(), mopts)
	defer m.Close()
	rfs := &readCountFS{FS: fsutil.OS}
	r := openReplica(t, opts, rfs)

	body := make([]byte, 500)
	var offs []int64
	for i := 0; i < 20; i++ {
		offs = append(offs, appendAll(t, m, encode(t, fmt.Sprintf("s%d", i%2), fmt.Sprintf("a%d", i), body, "t"))[0].Offset)
	}
	good, _ := m.CommittedEnds()
	// A group whose fdatasync fails: written (served as a tail), then cut.
	ffs.Fail(fsutil.OpSync, nil)
	var lost [][]byte
	for i := 0; i < 10; i++ {
		lost = append(lost, encode(t, "s0", fmt.Sprintf("lost%d", i), body))
	}
	if _, err := m.Append(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	ffs.Heal()
	reads := rfs.reads.Load()

	// One chunk of all of it, the replica told an older committed end
	// (the tenth record's start): ten records indexed, the rest kept.
	mc, err := m.Source().ReadMessageTailInto(nil, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	mc.End = offs[10]
	if err := r.Replica().ReplicateMessages(mc); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.CommittedEnds(); c != offs[10] {
		t.Fatalf("replica indexed up to %d, want %d", c, offs[10])
	}
	// A committed end inside a record is refused, and indexes nothing
	// past the records below it.
	torn := LogChunk{Start: mc.Start, End: offs[15] + 7, Offset: m.Source().MessageTailEnd()}
	if err := r.Replica().ReplicateMessages(torn); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("a committed end inside a record: %v", err)
	}
	if c, _ := r.CommittedEnds(); c != offs[15] {
		t.Fatalf("after a committed end inside a record the replica indexed up to %d, want %d", c, offs[15])
	}
	// The master cuts back to its committed end (inside the kept chunk,
	// past what the replica indexed) and writes other records there.
	var kept [][]byte
	for i := 0; i < 300; i++ { // several 64 KiB segments
		kept = append(kept, encode(t, fmt.Sprintf("s%d", i%3), fmt.Sprintf("k%d", i), body, "u"))
	}
	appendAll(t, m, kept...)
	if _, low := m.Source().MessageCuts(0); low != good {
		t.Fatalf("master's cut at %d, want its committed end %d", low, good)
	}
	if err := r.Replica().CutTail(good); err != nil {
		t.Fatal(err)
	}
	if r.repl.tailBytes != int(good-offs[15]) {
		t.Fatalf("after the cut %d bytes kept, want the %d between the indexed end and the cut", r.repl.tailBytes, good-offs[15])
	}
	// Chunks of at most 3000 bytes, each told the end before its own: the
	// kept bytes are indexed as the end passes them, across segment ends.
	copyTailChunks(t, m, r, 3000, nil)
	if c, _ := r.CommittedEnds(); c >= m.Source().MessageTailEnd() {
		t.Fatal("the replica indexed everything: the last chunk was not a tail")
	}
	// The committed end passes everything.
	end, _ := m.CommittedEnds()
	if err := r.Replica().ReplicateMessages(LogChunk{Start: mc.Start, End: end, Offset: end}); err != nil {
		t.Fatal(err)
	}
	// Only the padding at a segment's end is read (one header).
	if n, segs := rfs.reads.Load()-reads, len(m.msgLog.Segments()); n > int64(segs-1) {
		t.Fatalf("the replica read its message log back %d times over %d segments", n, segs)
	}
	if r.repl.tailBytes != 0 || len(r.repl.tail) != 0 {
		t.Fatalf("%d bytes in %d chunks kept after the end passed them all", r.repl.tailBytes, len(r.repl.tail))
	}
	if segs := len(m.msgLog.Segments()); segs < 3 {
		t.Fatalf("test needs several segments, master has %d", segs)
	}
	if got, want := messageLogBytes(t, r), messageLogBytes(t, m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica's message log (%d bytes) differs from the master's (%d bytes)", len(got), len(want))
	}
	if got, want := stateOf(r), stateOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica differs:\n got %+v\nwant %+v", got, want)
	}
	for _, subj := range []string{"s0", "s1", "s2"} {
		a, _ := m.Read(subj, 0, 1000)
		b, _ := r.Read(subj, 0, 1000)
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%s: master has %d messages, replica %d", subj, len(a), len(b))
		}
		for i := range a {
			if a[i].ConsumeSeq != b[i].ConsumeSeq || !reflect.DeepEqual(a[i].Message, b[i].Message) {
				t.Fatalf("%s: message %d differs", subj, i)
			}
		}
	}
}

// copyTailChunks copies m's written message-log tail to r in chunks of at
// most size bytes, each told as committed only the end before it (so each
// is kept as a tentative tail), calling after, if not nil, with each
// chunk once replicated, until m has nothing more.
func copyTailChunks(t *testing.T, m, r *Store, size int, after func(i int, mc LogChunk)) {
	t.Helper()
	for i := 0; ; i++ {
		from, _ := r.Replica().Ends()
		mc, err := m.Source().ReadMessageTailInto(nil, from, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(mc.Data) == 0 {
			return
		}
		mc.End = min(mc.End, from)
		if err := r.Replica().ReplicateMessages(mc); err != nil {
			t.Fatalf("chunk %d at %d: %v", i, mc.Offset, err)
		}
		if after != nil {
			after(i, mc)
		}
	}
}

// TestReplicaTailReadBackPastKeptBytes: chunks the replica did not keep
// (past maxKeptTail, here a chunk written before a restart of the step)
// are read back, and the kept ones after them still indexed from memory.
func TestReplicaTailReadBackPastKeptBytes(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	rfs := &readCountFS{FS: fsutil.OS}
	r := openReplica(t, opts, rfs)
	body := make([]byte, 400)
	for i := 0; i < 300; i++ {
		appendAll(t, m, encode(t, fmt.Sprintf("s%d", i%4), fmt.Sprintf("m%d", i), body))
	}
	reads := rfs.reads.Load()
	// Every chunk a tail; every other one forgotten as if over the bound.
	copyTailChunks(t, m, r, 5000, func(i int, mc LogChunk) {
		if i%2 == 0 {
			r.repl.cutTail(mc.Offset) // as if never kept
		}
	})
	end, _ := m.CommittedEnds()
	if err := r.Replica().ReplicateMessages(LogChunk{End: end, Offset: end}); err != nil {
		t.Fatal(err)
	}
	if rfs.reads.Load() == reads {
		t.Fatal("nothing read back: the test does not reach the read-back path")
	}
	if got, want := stateOf(r), stateOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica differs:\n got %+v\nwant %+v", got, want)
	}
	if got, want := messageLogBytes(t, r), messageLogBytes(t, m); !reflect.DeepEqual(got, want) {
		t.Fatal("replica's message log differs from the master's")
	}
}

// FuzzReplicaTail hands a replica chunks whose committed end (End) lies
// anywhere in or before them, so their records are kept as a tentative
// tail and indexed later from memory: it never panics, never indexes past
// what it has written, never moves its indexed end back, and a chunk
// with no data whose End is the written end indexes every record it
// wrote (or fails, at a committed end inside a record, without indexing).
func FuzzReplicaTail(f *testing.F) {
	opts := replicaOptions()
	m, err := Open(f.TempDir(), opts, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	var msgs [][]byte
	for i := 0; i < 6; i++ {
		msgs = append(msgs, encode(f, fmt.Sprint("s", i%2), fmt.Sprint(i), []byte("fuzz the tail"), "t"))
	}
	res, err := m.Append(f.Context(), msgs)
	if err != nil {
		f.Fatal(err)
	}
	mc, _ := m.Source().ReadMessageLog(0, 1<<20)
	f.Add(mc.Data, uint16(0))
	f.Add(mc.Data, uint16(len(mc.Data)-int(res[3].Offset)))
	f.Add(mc.Data, uint16(len(mc.Data)-int(res[3].Offset)-5))
	f.Add(mc.Data[:res[2].Offset], uint16(3))
	ropts := opts
	ropts.Replica = true
	r, err := Open(f.TempDir(), ropts, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer r.Close()
	f.Fuzz(func(t *testing.T, data []byte, tentative uint16) {
		data = bytes.Clone(data) // the replica keeps it
		written, _ := r.Replica().Ends()
		indexed, _ := r.CommittedEnds()
		end := max(written+int64(len(data))-int64(tentative), indexed)
		err := r.Replica().ReplicateMessages(LogChunk{Offset: written, End: end, Data: data})
		w2, _ := r.Replica().Ends()
		i2, _ := r.CommittedEnds()
		if i2 < indexed || i2 > w2 {
			t.Fatalf("indexed end %d → %d with the written end %d (%v)", indexed, i2, w2, err)
		}
		if r.repl.tailBytes > maxKeptTail || r.repl.tailBytes < 0 {
			t.Fatalf("%d bytes kept", r.repl.tailBytes)
		}
		err = r.Replica().ReplicateMessages(LogChunk{Offset: w2, End: w2})
		i3, _ := r.CommittedEnds()
		if err == nil && i3 != w2 {
			t.Fatalf("told the end %d of all it wrote, the replica indexed up to %d", w2, i3)
		}
		if err != nil && i3 < i2 {
			t.Fatalf("a refused end moved the indexed end back from %d to %d: %v", i2, i3, err)
		}
	})
}

// TestReplicaFeedsTheMessageIndex: a replica's message index takes the
// entries of the records it indexes (indexReplicated parses them anyway)
// instead of reading its log back: across segment ends, through kept
// tail chunks and read-back ones, a replica with the index reads its log
// back no more than one without, holds the master's entries, and finds
// every message by id and key.
func TestReplicaFeedsTheMessageIndex(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	const n = 3000
	for i := 0; i < n; i += 50 {
		var batch [][]byte
		for j := i; j < i+50; j++ {
			key := ""
			if j%3 == 0 {
				key = fmt.Sprintf("key-%d", j%50)
			}
			batch = append(batch, encodeKeyed(t, fmt.Sprintf("s%d", j%3), fmt.Sprintf("id-%d", j), key, 0))
		}
		appendAll(t, m, batch...)
	}
	if segs := len(m.msgLog.Segments()); segs < 3 {
		t.Fatalf("test needs several segments, master has %d", segs)
	}
	end, _ := m.CommittedEnds()
	testutil.Eventually(t, 10*time.Second, "the master's index to reach its end", func() bool {
		return m.index.end.Load() >= end
	})
	// Every chunk a tentative tail; every third one forgotten, as if past
	// the kept bound (the consume logs read it back).
	replicaReads := func(noIndex bool) (*Store, int64) {
		o := opts
		o.NoMessageIndex = noIndex
		rfs := &readCountFS{FS: fsutil.OS}
		r := openReplica(t, o, rfs)
		reads := rfs.reads.Load()
		copyTailChunks(t, m, r, 4000, func(i int, mc LogChunk) {
			if i%3 == 0 {
				r.repl.cutTail(mc.Offset)
			}
		})
		if err := r.Replica().ReplicateMessages(LogChunk{End: end, Offset: end}); err != nil {
			t.Fatal(err)
		}
		if !noIndex {
			testutil.Eventually(t, 10*time.Second, "the replica's index to reach its end", func() bool {
				return r.index.end.Load() >= end
			})
		}
		return r, rfs.reads.Load() - reads
	}
	_, without := replicaReads(true)
	r, with := replicaReads(false)
	if without == 0 {
		t.Fatal("nothing read back: the test does not reach the read-back path")
	}
	if with != without {
		t.Fatalf("the replica read its log back %d times with the message index, %d without", with, without)
	}
	entries := func(s *Store) []runEntry {
		x := s.index
		x.mu.Lock()
		defer x.mu.Unlock()
		x.spillLocked()
		var got []runEntry
		for _, run := range x.runs {
			b, err := os.ReadFile(run.path)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, decodeRun(t, b)...)
		}
		slices.SortFunc(got, func(a, b runEntry) int {
			if c := cmpU64(a.top, b.top); c != 0 {
				return c
			}
			return int(a.off - b.off)
		})
		return got
	}
	if got, want := entries(r), entries(m); len(got) == 0 || !slices.Equal(got, want) {
		t.Fatalf("the replica's index holds %d entries, the master's %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	for i := 0; i < n; i += 13 {
		fs, err := r.Lookup().ByID(fmt.Sprintf("id-%d", i))
		if got := foundIDs(t, fs, err); len(got) != 1 || got[0] != fmt.Sprintf("s%d/id-%d", i%3, i) {
			t.Fatalf("id-%d found %v", i, got)
		}
	}
	fs, err := r.Lookup().ByKey("key-21")
	if got := foundIDs(t, fs, err); len(got) != n/150 || got[0] != "s0/id-21" || got[1] != "s0/id-171" {
		t.Fatalf("key-21 found %v", got)
	}
}
