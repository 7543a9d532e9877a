package store

import (
	"fmt"
	"testing"
)

// TestTryAck: the non-waiting ack applies a contiguous ack like Ack (and
// the action log carries it through a restart), and changes nothing where
// Ack would wait or has something to report: a gap, pull sequences the
// store does not know, an unknown consumer or group, a broadcast ack, a
// held group lock.
func TestTryAck(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	appendN(t, s, "orders", "m", 10)
	r := pull(t, s, PullRequest{Subject: "orders", Group: "g", Consumer: "c1", Max: 10, Earliest: true})
	if len(r.Messages) != 10 {
		t.Fatalf("pulled %d", len(r.Messages))
	}
	try := func(first, last int64) (int64, bool) {
		return s.TryAck(AckRequest{Subject: "orders", Group: "g", Consumer: "c1", First: first, Last: last})
	}
	if acked, ok := try(0, 3); !ok || acked != 3 {
		t.Fatalf("contiguous ack: acked %d, ok %v", acked, ok)
	}
	if acked, ok := try(0, 2); !ok || acked != 3 {
		t.Fatalf("duplicate ack: acked %d, ok %v", acked, ok)
	}
	refused := []struct {
		name string
		req  AckRequest
	}{
		{"a gap below first", AckRequest{Subject: "orders", Group: "g", Consumer: "c1", First: 6, Last: 7}},
		{"pull seqs not pulled", AckRequest{Subject: "orders", Group: "g", Consumer: "c1", First: 4, Last: 10}},
		{"an unknown consumer", AckRequest{Subject: "orders", Group: "g", Consumer: "c9", First: 0, Last: 1}},
		{"an unknown group", AckRequest{Subject: "orders", Group: "x", Consumer: "c1", First: 0, Last: 1}},
		{"a broadcast ack", AckRequest{Subject: "orders", Group: "g", Consumer: "c1", First: 4, Last: 5, Broadcast: true}},
		{"an empty range", AckRequest{Subject: "orders", Group: "g", Consumer: "c1", First: 5, Last: 4}},
	}
	for _, c := range refused {
		if _, ok := s.TryAck(c.req); ok {
			t.Fatalf("TryAck took %s", c.name)
		}
	}
	g, _, _ := s.groupFor(groupKey{subject: "orders", group: "g"}, false, false)
	g.mu.Lock()
	_, ok := try(4, 5)
	g.mu.Unlock()
	if ok {
		t.Fatal("TryAck waited for a held group lock or ignored it")
	}
	if acked, ok := try(4, 5); !ok || acked != 5 {
		t.Fatalf("ack after the lock was free: acked %d, ok %v", acked, ok)
	}
	// What was refused is still there for Ack: the gap 6 comes back.
	if ar := ack(t, s, "orders", "g", "c1", 7, 7); fmt.Sprint(ids(t, ar.Gap)) != "[m-6]" || ar.Acked != 7 {
		t.Fatalf("Ack after the refusals: gap %v acked %d", ids(t, ar.Gap), ar.Acked)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The acks went through the action log: after a restart c1 is acked
	// through 7 and its entries 8 and 9 are still its own.
	s = openStore(t, dir, testOptions())
	defer s.Close()
	found := false
	for _, gs := range s.Stats().Groups {
		for _, c := range gs.Consumers {
			if gs.Group == "g" && c.ID == "c1" {
				found = true
				if c.AckSeq != 7 || c.Unacked != 2 {
					t.Fatalf("after restart: %+v", c)
				}
			}
		}
	}
	if !found {
		t.Fatal("after restart: no consumer c1 of group g")
	}
}
