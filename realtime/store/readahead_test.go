package store

import (
	"fmt"
	"testing"
)

// TestReadAheadAcrossPullsAndAppends drains a backlog larger than the
// read-ahead with small pulls of several consumers while appends go on, and
// checks that every message is handed out exactly once, with its own bytes,
// and that a caught-up group keeps no read-ahead buffer.
func TestReadAheadAcrossPullsAndAppends(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	msgs := appendN(t, s, "a", "m", 3*readAheadEntries+17)
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
	if kept != nil {
		t.Fatalf("a caught-up group keeps %d bytes of read-ahead", len(kept))
	}
}
