package store

import "testing"

// A message's delivery in each group follows its pulls and acks: waiting
// before the group takes it, un-acked with the consumer that holds it,
// done once acked.
func TestDeliveries(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c1", Earliest: true})
	pull(t, s, PullRequest{Subject: "a", Group: "h", Consumer: "c2", Earliest: true})
	appendN(t, s, "a", "m", 3)
	state := func(seq int64) string {
		t.Helper()
		ds, err := s.Lookup().Deliveries("a", seq)
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, d := range ds {
			out += d.Group + ":" + d.State
			if d.Consumer != "" {
				out += ":" + d.Consumer
			}
			out += " "
		}
		return out
	}
	if got := state(1); got != "g:waiting h:waiting " {
		t.Fatalf("before pulls: %q", got)
	}
	r := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c1", Max: 2})
	if got := state(1); got != "g:unacked:c1 h:waiting " {
		t.Fatalf("after a pull: %q", got)
	}
	ack(t, s, "a", "g", "c1", r.Messages[0].PullSeq, r.Messages[1].PullSeq)
	if got := state(1); got != "g:done h:waiting " {
		t.Fatalf("after the ack: %q", got)
	}
	if got := state(2); got != "g:waiting h:waiting " {
		t.Fatalf("the third message: %q", got)
	}
	if ds, err := s.Lookup().Deliveries("nothing", 0); err != nil || len(ds) != 0 {
		t.Fatalf("a subject without groups: %v, %v", ds, err)
	}
}
