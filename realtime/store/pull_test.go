package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

func pull(t testing.TB, s *Store, req PullRequest) PullResult {
	t.Helper()
	if req.Max == 0 {
		req.Max = 10
	}
	if req.KnownPullSeq == 0 {
		req.KnownPullSeq = -1
	}
	r, err := s.Pull(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ids(t testing.TB, ps []Pulled) []string {
	var out []string
	for _, p := range ps {
		out = append(out, msgID(t, p.Message))
	}
	return out
}

func ack(t testing.TB, s *Store, subject, group, consumer string, first, last int64) AckResult {
	t.Helper()
	r, err := s.Ack(AckRequest{Subject: subject, Group: group, Consumer: consumer, First: first, Last: last})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// crashCopy copies the store's files as they are now, as a SIGKILL would
// leave them (the page cache survives), into a new directory.
func crashCopy(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	copyDir(t, src, dst)
	return dst
}

func TestGroupSharesCursorAndAcks(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	appendN(t, s, "orders", "old", 5)
	// A new group starts at latest.
	if r := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c1"}); len(r.Messages) != 0 {
		t.Fatalf("new group got %d old messages", len(r.Messages))
	}
	// Earliest asks for everything kept.
	if r := pull(t, s, PullRequest{Subject: "orders", Group: "e", Consumer: "c1", Earliest: true}); len(r.Messages) != 5 {
		t.Fatalf("earliest group got %d", len(r.Messages))
	}
	appendN(t, s, "orders", "m", 10)
	r1 := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c1", Max: 4})
	r2 := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c2", Max: 100})
	if got := ids(t, r1.Messages); fmt.Sprint(got) != "[m-0 m-1 m-2 m-3]" {
		t.Fatalf("c1 got %v", got)
	}
	if len(r2.Messages) != 6 || r2.Messages[0].PullSeq != 0 || r2.Messages[0].ConsumeSeq != 9 {
		t.Fatalf("c2 got %+v", r2.Messages[0])
	}
	// Re-delivery: c1 says it holds nothing; its un-acked entries come back.
	again := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c1", Max: 10, KnownPullSeq: -1})
	if !again.Redelivered || fmt.Sprint(ids(t, again.Messages)) != "[m-0 m-1 m-2 m-3]" {
		t.Fatalf("redelivery %v %v", again.Redelivered, ids(t, again.Messages))
	}
	// Holding them, nothing new arrives.
	if r := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c1", KnownPullSeq: 3}); len(r.Messages) != 0 {
		t.Fatalf("got %d", len(r.Messages))
	}
	// Ack 2..3 over a lost ack of 0..1: the gap comes back for retry.
	ar := ack(t, s, "orders", "g", "c1", 2, 3)
	if fmt.Sprint(ids(t, ar.Gap)) != "[m-0 m-1]" || ar.Acked != 3 {
		t.Fatalf("gap %v acked %d", ids(t, ar.Gap), ar.Acked)
	}
	// Duplicate ack changes nothing.
	if ar := ack(t, s, "orders", "g", "c1", 0, 3); len(ar.Gap) != 0 || ar.Acked != 3 {
		t.Fatalf("dup ack %+v", ar)
	}
	// c2 dies: its 6 un-acked entries go to c1 before anything new.
	n, err := s.ReturnUnacked("orders", "g", "c2")
	if err != nil || n != 6 {
		t.Fatalf("returned %d, %v", n, err)
	}
	appendN(t, s, "orders", "n", 2)
	r := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c1", Max: 100, KnownPullSeq: 3})
	if got := fmt.Sprint(ids(t, r.Messages)); got != "[m-4 m-5 m-6 m-7 m-8 m-9 n-0 n-1]" {
		t.Fatalf("after return: %s", got)
	}
	if r.Messages[0].PullSeq != 4 {
		t.Fatalf("pull seq %d", r.Messages[0].PullSeq)
	}
	st := s.Stats()
	for _, g := range st.Groups {
		if g.Group == "g" && (g.Backlog != 0 || g.Cursor != 17 || len(g.Consumers) != 2) {
			t.Fatalf("group stats %+v", g)
		}
	}
}

func TestTagFilterAndBroadcast(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "t", Group: "any", Consumer: "c", TagMode: protocol.TagAny, Tags: []string{"red", "blue"}})
	pull(t, s, PullRequest{Subject: "t", Group: "all", Consumer: "c", TagMode: protocol.TagAll, Tags: []string{"red", "big"}})
	pull(t, s, PullRequest{Subject: "t", Group: "x", Consumer: "b1", Broadcast: true})
	pull(t, s, PullRequest{Subject: "t", Group: "x", Consumer: "b2", Broadcast: true})
	appendAll(t, s,
		encode(t, "t", "1", nil, "red"),
		encode(t, "t", "2", nil),
		encode(t, "t", "3", nil, "blue", "big"),
		encode(t, "t", "4", nil, "red", "big"),
		encode(t, "t", "5", nil, "green"))
	// Many non-matching tags to provoke bloom false positives.
	var noise [][]byte
	for i := 0; i < 200; i++ {
		noise = append(noise, encode(t, "t", fmt.Sprint("z", i), nil, fmt.Sprint("tag", i)))
	}
	appendAll(t, s, noise...)
	r := pull(t, s, PullRequest{Subject: "t", Group: "any", Consumer: "c", Max: 100, TagMode: protocol.TagAny, Tags: []string{"red", "blue"}})
	if got := fmt.Sprint(ids(t, r.Messages)); got != "[1 3 4]" {
		t.Fatalf("OR filter: %s", got)
	}
	r = pull(t, s, PullRequest{Subject: "t", Group: "all", Consumer: "c", Max: 100, TagMode: protocol.TagAll, Tags: []string{"red", "big"}})
	if got := fmt.Sprint(ids(t, r.Messages)); got != "[4]" {
		t.Fatalf("AND filter: %s", got)
	}
	// Broadcast: each subscriber sees everything, pull seq == consume seq.
	for _, c := range []string{"b1", "b2"} {
		r := pull(t, s, PullRequest{Subject: "t", Consumer: c, Broadcast: true, Max: 3})
		if len(r.Messages) != 3 || r.Messages[2].PullSeq != 2 || r.Messages[2].ConsumeSeq != 2 {
			t.Fatalf("broadcast %s: %+v", c, r.Messages)
		}
	}
	if _, err := s.Ack(AckRequest{Subject: "t", Consumer: "b1", Broadcast: true, First: 0, Last: 2}); err != nil {
		t.Fatal(err)
	}
	r = pull(t, s, PullRequest{Subject: "t", Consumer: "b1", Broadcast: true, Max: 3, KnownPullSeq: -1})
	if r.Redelivered || r.Messages[0].ConsumeSeq != 3 {
		t.Fatalf("broadcast after ack: %+v", r.Messages[0])
	}
	r = pull(t, s, PullRequest{Subject: "t", Consumer: "b2", Broadcast: true, Max: 3, KnownPullSeq: -1})
	if !r.Redelivered || r.Messages[0].ConsumeSeq != 0 {
		t.Fatalf("broadcast redelivery: %+v", r)
	}
}

func TestHoldUntilDueAndReset(t *testing.T) {
	clock := newTestClock()
	opts := testOptions()
	opts.Clock = clock.Now
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	pull(t, s, PullRequest{Subject: "r", Group: "g", Consumer: "c"})
	due := clock.Now().Add(5 * time.Second)
	m, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "r", ID: "later", DeliverAt: due}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, encode(t, "r", "now", nil), m, encode(t, "r", "after", nil))
	r := pull(t, s, PullRequest{Subject: "r", Group: "g", Consumer: "c", Max: 10, HoldUntilDue: true})
	if fmt.Sprint(ids(t, r.Messages)) != "[now]" || r.NextDue != due.UnixMilli() {
		t.Fatalf("hold: %v next due %d", ids(t, r.Messages), r.NextDue)
	}
	clock.Add(6 * time.Second)
	r, err = s.Pull(PullRequest{Subject: "r", Group: "g", Consumer: "c", Max: 10, HoldUntilDue: true, KnownPullSeq: 0})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(t, r.Messages)) != "[later after]" {
		t.Fatalf("after due: %v", ids(t, r.Messages))
	}
	appendAll(t, s, encode(t, "r", "late", nil))
	cur, err := s.ResetGroup("r", "g", ResetTime, clock.Now())
	if err != nil || cur != 3 {
		t.Fatalf("reset to time: %d %v", cur, err)
	}
	if cur, _ := s.ResetGroup("r", "g", ResetEarliest, time.Time{}); cur != 0 {
		t.Fatalf("reset earliest: %d", cur)
	}
	r = pull(t, s, PullRequest{Subject: "r", Group: "g", Consumer: "c", Max: 10, KnownPullSeq: 2})
	if len(r.Messages) != 4 {
		t.Fatalf("after reset got %d", len(r.Messages))
	}
	if cur, _ := s.ResetGroup("r", "g", ResetLatest, time.Time{}); cur != 4 {
		t.Fatalf("reset latest: %d", cur)
	}
}

// TestGroupStateSurvivesCrash checks that pulls and acks are rebuilt from
// the action log (no checkpoint) and from a checkpoint plus tail.
func TestGroupStateSurvivesCrash(t *testing.T) {
	for _, withCheckpoint := range []bool{false, true} {
		t.Run(fmt.Sprint("checkpoint=", withCheckpoint), func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, testOptions())
			defer s.Close()
			pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1"})
			appendN(t, s, "o", "m", 30)
			pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 10})
			if withCheckpoint {
				if err := s.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c2", Max: 5})
			ack(t, s, "o", "g", "c1", 0, 6)
			if _, err := s.ReturnUnacked("o", "g", "c2"); err != nil {
				t.Fatal(err)
			}
			if err := s.actions.flush(); err != nil {
				t.Fatal(err)
			}
			want := s.Stats().Groups
			s2 := openStore(t, crashCopy(t, dir), testOptions())
			defer s2.Close()
			got := s2.Stats().Groups
			if fmt.Sprint(stripSeen(got)) != fmt.Sprint(stripSeen(want)) {
				t.Fatalf("groups after crash:\n got %+v\nwant %+v", got, want)
			}
			// c1's un-acked 7..9 come back; then c2's returned entries.
			r := pull(t, s2, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 20, KnownPullSeq: 6})
			if fmt.Sprint(ids(t, r.Messages)) != "[m-7 m-8 m-9]" {
				t.Fatalf("redelivered %v", ids(t, r.Messages))
			}
			r = pull(t, s2, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 20, KnownPullSeq: 9})
			if len(r.Messages) != 20 || msgID(t, r.Messages[0].Message) != "m-10" {
				t.Fatalf("after crash new %v", ids(t, r.Messages))
			}
		})
	}
}

func stripSeen(gs []GroupStats) []GroupStats {
	out := append([]GroupStats(nil), gs...)
	for i := range out {
		cs := append([]ConsumerStats(nil), out[i].Consumers...)
		for j := range cs {
			cs[j].LastSeen = time.Time{}
		}
		out[i].Consumers = cs
	}
	return out
}

// TestLostPullActionsAreVoided: after a crash loses the action log's tail,
// a consumer that still holds pull seqs the store no longer knows must not
// be able to ack other messages with them.
func TestLostPullActionsAreVoided(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1"})
	appendN(t, s, "o", "m", 10)
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	snap := crashCopy(t, dir) // the pull below is lost
	pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 4})

	s2 := openStore(t, snap, testOptions())
	defer s2.Close()
	// c1 holds pull seqs 0..3 (for m-0..m-3) that s2 never saw; another
	// consumer takes m-0..m-3 now.
	r := pull(t, s2, PullRequest{Subject: "o", Group: "g", Consumer: "c2", Max: 4})
	if fmt.Sprint(ids(t, r.Messages)) != "[m-0 m-1 m-2 m-3]" {
		t.Fatalf("c2 got %v", ids(t, r.Messages))
	}
	// c1 acks its stale 0..3: voided, nothing of c2's is touched.
	if ar := ack(t, s2, "o", "g", "c1", 0, 3); ar.Acked != 3 || len(ar.Gap) != 0 {
		t.Fatalf("stale ack %+v", ar)
	}
	r = pull(t, s2, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 10, KnownPullSeq: 3})
	if len(r.Messages) != 6 || r.Messages[0].PullSeq != 4 || msgID(t, r.Messages[0].Message) != "m-4" {
		t.Fatalf("c1 after void: %+v", ids(t, r.Messages))
	}
}

// TestPipelinedPull: a pipelined pull takes new entries even though the
// consumer's earlier ones are above its KnownPullSeq (they are in flight to
// it), a plain pull still re-delivers what the consumer lost, and a
// pipelined pull still voids pull sequences the store lost.
func TestPipelinedPull(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1"})
	pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Broadcast: true})
	appendN(t, s, "o", "m", 12)
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	snap := crashCopy(t, dir) // before any of the pulls below

	// Two pulls in flight: the second, sent before the first's answer,
	// says pipelined and gets the next entries, not the first's again.
	first := pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 3, KnownPullSeq: -1})
	second := pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 3, KnownPullSeq: -1, Pipelined: true})
	if got := fmt.Sprint(ids(t, first.Messages), ids(t, second.Messages)); got != "[m-0 m-1 m-2] [m-3 m-4 m-5]" {
		t.Fatalf("pipelined pulls got %s", got)
	}
	if second.Redelivered || second.Messages[0].PullSeq != 3 {
		t.Fatalf("pipelined pull: redelivered %v, first pull seq %d", second.Redelivered, second.Messages[0].PullSeq)
	}
	// The second answer was lost: a plain pull knowing 0..2 gets 3..5 again.
	again := pull(t, s, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 10, KnownPullSeq: 2})
	if !again.Redelivered || fmt.Sprint(ids(t, again.Messages)) != "[m-3 m-4 m-5]" {
		t.Fatalf("plain pull after a lost pipelined answer: %v %v", again.Redelivered, ids(t, again.Messages))
	}
	// Broadcast subscribers pipeline the same way.
	b1 := pull(t, s, PullRequest{Subject: "o", Consumer: "c1", Broadcast: true, Max: 4, KnownPullSeq: -1})
	b2 := pull(t, s, PullRequest{Subject: "o", Consumer: "c1", Broadcast: true, Max: 4, KnownPullSeq: -1, Pipelined: true})
	if b2.Redelivered || b1.Messages[0].ConsumeSeq != 0 || b2.Messages[0].ConsumeSeq != 4 {
		t.Fatalf("broadcast pipelined: %v %+v %+v", b2.Redelivered, b1.Messages[0], b2.Messages[0])
	}

	// After a crash that lost the pulls above, c1 still holds pull seqs
	// 0..5: a pipelined pull naming them voids them before handing out new
	// ones, so they can never name other messages.
	s2 := openStore(t, snap, testOptions())
	defer s2.Close()
	r := pull(t, s2, PullRequest{Subject: "o", Group: "g", Consumer: "c1", Max: 3, KnownPullSeq: 5, Pipelined: true})
	if len(r.Messages) != 3 || r.Messages[0].PullSeq != 6 || msgID(t, r.Messages[0].Message) != "m-0" {
		t.Fatalf("pipelined pull after lost pulls: %+v %v", r.Messages, ids(t, r.Messages))
	}
	if ar := ack(t, s2, "o", "g", "c1", 0, 5); ar.Acked != 5 || len(ar.Gap) != 0 {
		t.Fatalf("stale ack of the voided seqs: %+v", ar)
	}
}

// TestReturnManyUnacked returns more un-acked entries than one action holds.
func TestReturnManyUnacked(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "big", Group: "g", Consumer: "c1"})
	appendN(t, s, "big", "m", 9000)
	r := pull(t, s, PullRequest{Subject: "big", Group: "g", Consumer: "c1", Max: MaxPull})
	if len(r.Messages) != 9000 {
		t.Fatalf("pulled %d", len(r.Messages))
	}
	ack(t, s, "big", "g", "c1", 0, 99)
	n, err := s.ReturnUnacked("big", "g", "c1")
	if err != nil || n != 8900 {
		t.Fatalf("returned %d, %v", n, err)
	}
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, crashCopy(t, dir), testOptions())
	defer s2.Close()
	if g := s2.Stats().Groups[0]; g.Returned != 8900 || g.Consumers[0].AckSeq != 8999 {
		t.Fatalf("after crash: %+v", g)
	}
	r = pull(t, s2, PullRequest{Subject: "big", Group: "g", Consumer: "c2", Max: MaxPull})
	if len(r.Messages) != 8900 || msgID(t, r.Messages[0].Message) != "m-100" || msgID(t, r.Messages[8899].Message) != "m-8999" {
		t.Fatalf("c2 got %d", len(r.Messages))
	}
}

// An ack above a gap wider than maxGapRetry hands the gap's entries back to
// the group, a returnChunk at a time, instead of reading their messages
// for the retry subject; entries above the ack stay the consumer's. A
// crash copy holds the same.
func TestAckOverAWideGapReturnsIt(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "big", Group: "g", Consumer: "c1"})
	appendN(t, s, "big", "m", 9000)
	if r := pull(t, s, PullRequest{Subject: "big", Group: "g", Consumer: "c1", Max: MaxPull}); len(r.Messages) != 9000 {
		t.Fatalf("pulled %d", len(r.Messages))
	}
	ack(t, s, "big", "g", "c1", 0, 99)
	// Acks of 100..8899 were lost; 8900..8949 come.
	ar := ack(t, s, "big", "g", "c1", 8900, 8949)
	if len(ar.Gap) != 0 || ar.Returned != 8800 || ar.Acked != 8949 {
		t.Fatalf("ack over an 8800-entry gap: %d in Gap, %d returned, acked %d", len(ar.Gap), ar.Returned, ar.Acked)
	}
	// A gap within maxGapRetry still comes back for the retry subject.
	if ar := ack(t, s, "big", "g", "c1", 8960, 8999); fmt.Sprint(len(ar.Gap), ar.Returned) != "10 0" {
		t.Fatalf("ack over a 10-entry gap: %d in Gap, %d returned", len(ar.Gap), ar.Returned)
	}
	if err := s.actions.flush(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, openStore(t, crashCopy(t, dir), testOptions())} {
		if g := st.Stats().Groups[0]; g.Returned != 8800 || g.Consumers[0].AckSeq != 8999 {
			t.Fatalf("returned %d, acked %d", g.Returned, g.Consumers[0].AckSeq)
		}
		r := pull(t, st, PullRequest{Subject: "big", Group: "g", Consumer: "c2", Max: MaxPull})
		if len(r.Messages) != 8800 || msgID(t, r.Messages[0].Message) != "m-100" || msgID(t, r.Messages[8799].Message) != "m-8899" {
			t.Fatalf("c2 got %d", len(r.Messages))
		}
		if st != s {
			st.Close()
		}
	}
}

func TestBogusSequencesRejected(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c"})
	appendN(t, s, "a", "m", 3)
	if _, err := s.Pull(PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 1, KnownPullSeq: 1 << 40}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("pull with a bogus known seq: %v", err)
	}
	if _, err := s.Ack(AckRequest{Subject: "a", Group: "g", Consumer: "c", First: 0, Last: 1 << 50}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ack far beyond the pulls: %v", err)
	}
	if _, err := s.Ack(AckRequest{Subject: "a", Group: "g", Consumer: "c", First: 5, Last: 2}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty range: %v", err)
	}
	if r := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Max: 10}); len(r.Messages) != 3 {
		t.Fatalf("state changed by bogus requests: %d", len(r.Messages))
	}
}
