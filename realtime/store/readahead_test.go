package store

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// TestReadAheadAcrossPullsAndAppends drains backlogs larger than the
// read-aheads (of entries, and with large bodies of message-log bytes)
// with small pulls of several consumers while appends go on, and checks
// that every message is handed out exactly once, with its own bytes, and
// that a caught-up group keeps no read-ahead buffer.
func TestReadAheadAcrossPullsAndAppends(t *testing.T) {
	for _, size := range []int{10, 1500} {
		t.Run(fmt.Sprint("body", size), func(t *testing.T) { testReadAhead(t, size) })
	}
}

func testReadAhead(t *testing.T, size int) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	var msgs [][]byte
	for i := 0; i < 3*readAheadEntries+17; i += 50 {
		var batch [][]byte
		for j := i; j < min(i+50, 3*readAheadEntries+17); j++ {
			batch = append(batch, encode(t, "a", fmt.Sprint("m-", j), bytes.Repeat([]byte{byte(j)}, size)))
		}
		appendAll(t, s, batch...)
		msgs = append(msgs, batch...)
	}
	if size > 1000 && s.goodEnd.Load() < 3*messageReadAheadBytes {
		t.Fatalf("backlog of %d bytes does not exercise the message read-ahead", s.goodEnd.Load())
	}
	seen := make(map[int64]bool)
	known := map[string]int64{"c0": -1, "c1": -1, "c2": -1, "c3": -1} // each consumer holds what it pulled
	for round := 0; ; round++ {
		c := fmt.Sprint("c", round%4)
		r := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: c, Earliest: true, Max: 37, KnownPullSeq: known[c]})
		if r.Redelivered {
			t.Fatal("a consumer that holds everything got re-deliveries")
		}
		for _, m := range r.Messages {
			known[c] = m.PullSeq
			if seen[m.ConsumeSeq] {
				t.Fatalf("message %d handed out twice", m.ConsumeSeq)
			}
			seen[m.ConsumeSeq] = true
			if string(m.Message) != string(msgs[m.ConsumeSeq]) {
				t.Fatalf("message %d: wrong bytes", m.ConsumeSeq)
			}
		}
		r.Release()
		if round%5 == 0 && round < 60 {
			msgs = append(msgs, appendN(t, s, "a", fmt.Sprint("r", round), 7)...)
		}
		if len(r.Messages) == 0 && round > 60 {
			break
		}
	}
	if len(seen) != len(msgs) {
		t.Fatalf("handed out %d of %d", len(seen), len(msgs))
	}
	g, _, err := s.groupFor(groupKey{subject: "a", group: "g"}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	kept := g.ahead.buf
	g.mu.Unlock()
	if keptMsgs := g.msgAhead.buffered(); kept != nil || keptMsgs != 0 {
		t.Fatalf("a caught-up group keeps %d bytes of entries and %d of messages read ahead", len(kept), keptMsgs)
	}
}

// TestSparseSubjectReadsDirectly checks that a group of a subject that is a
// small part of the message log reads its records directly, not 256 KiB
// of other subjects' records at a time, and still gets every message.
func TestSparseSubjectReadsDirectly(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	var rare [][]byte
	for i := 0; i < 40; i++ {
		var batch [][]byte
		for j := 0; j < 20; j++ {
			batch = append(batch, encode(t, "busy", fmt.Sprint("b-", i, "-", j), bytes.Repeat([]byte{'b'}, 1500)))
		}
		m := encode(t, "rare", fmt.Sprint("r-", i), []byte("rare"))
		rare = append(rare, m)
		appendAll(t, s, append(batch, m)...)
	}
	known := int64(-1)
	var got int
	for {
		r := pull(t, s, PullRequest{Subject: "rare", Group: "g", Consumer: "c", Earliest: true, Max: 16, KnownPullSeq: known})
		if len(r.Messages) == 0 {
			break
		}
		for _, m := range r.Messages {
			if string(m.Message) != string(rare[m.ConsumeSeq]) {
				t.Fatalf("message %d: wrong bytes", m.ConsumeSeq)
			}
			known = m.PullSeq
			got++
		}
		g, _, err := s.groupFor(groupKey{subject: "rare", group: "g"}, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if n := g.msgAhead.buffered(); n != 0 {
			t.Fatalf("a sparse subject read %d bytes ahead", n)
		}
	}
	if got != len(rare) {
		t.Fatalf("got %d of %d", got, len(rare))
	}
}

// TestCaughtUpPullsAllocateNoReadAhead checks that a group at its subject's
// end, pulling the few entries appended since its last pull, reads them
// into pooled memory instead of a fresh read-ahead buffer per pull (20 KiB
// each, once most of what a broker allocated at a steady rate).
func TestCaughtUpPullsAllocateNoReadAhead(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	known := int64(-1)
	round := func(i int) {
		appendN(t, s, "a", fmt.Sprint("m", i, "-"), 3)
		r := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Earliest: true, Max: 64, KnownPullSeq: known})
		if len(r.Messages) != 3 {
			t.Fatalf("round %d: pulled %d messages, want 3", i, len(r.Messages))
		}
		known = r.Messages[2].PullSeq
		r.Release()
	}
	for i := range 20 { // warm the pools
		round(i)
	}
	const rounds = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range rounds {
		round(20 + i)
	}
	runtime.ReadMemStats(&after)
	perRound := (after.TotalAlloc - before.TotalAlloc) / rounds
	if limit := uint64(readAheadEntries * entryWidth / 2); perRound > limit {
		t.Fatalf("an append and a caught-up pull of 3 messages allocated %d bytes, want under %d (a read-ahead buffer is %d)",
			perRound, limit, readAheadEntries*entryWidth)
	}
	t.Logf("%d bytes allocated a round", perRound)
}

// TestReadAheadKeepsHeldViews checks that pulls view the read-ahead buffer
// without copying and that a read ahead never overwrites a buffer a pull
// result still views: results held across many later pulls (which read
// ahead several times over) keep their own bytes until released, and a
// released buffer is reused.
func TestReadAheadKeepsHeldViews(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	var msgs [][]byte
	for i := 0; s.goodEnd.Load() < 6*messageReadAheadBytes; i++ {
		m := encode(t, "a", fmt.Sprint("m-", i), bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 700))
		appendAll(t, s, m)
		msgs = append(msgs, m)
	}
	check := func(r PullResult) {
		t.Helper()
		for _, m := range r.Messages {
			if string(m.Message) != string(msgs[m.ConsumeSeq]) {
				t.Fatalf("message %d: wrong bytes", m.ConsumeSeq)
			}
		}
	}
	known := int64(-1)
	var held []PullResult
	views := 0
	for round := 0; ; round++ {
		r := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Earliest: true, Max: 20, KnownPullSeq: known})
		if len(r.Messages) == 0 {
			break
		}
		known = r.Messages[len(r.Messages)-1].PullSeq
		if len(r.buf.held) > 0 {
			views++
		}
		check(r)
		if round%7 == 0 {
			held = append(held, r) // kept across later read-aheads
		} else {
			r.Release()
		}
		for _, h := range held {
			check(h)
		}
	}
	if views == 0 {
		t.Fatal("no pull viewed the read-ahead buffer")
	}
	for _, h := range held {
		check(h)
		h.Release()
	}
}
