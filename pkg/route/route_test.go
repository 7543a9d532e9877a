package route

import (
	"context"
	"errors"
	"testing"
)

func TestStatic(t *testing.T) {
	s := NewStatic(Groups("a:1", "b:2"), nil)
	gs, err := s.Resolve(context.Background(), Request{Kind: Produce, Subject: "x"})
	if err != nil || len(gs) != 2 || gs[1].Name != "g1" || !gs[0].Writable() {
		t.Fatalf("got %v %v", gs, err)
	}
	if _, err := s.Resolve(context.Background(), Request{Kind: ProduceDelay, Subject: "x"}); !errors.Is(err, ErrNoGroups) {
		t.Fatalf("delay without groups: %v", err)
	}
	s.Set(nil, Groups("d:1"))
	if gs, _ := s.Resolve(context.Background(), Request{Kind: ProduceDelay}); len(gs) != 1 {
		t.Fatal("Set ignored")
	}
	if (Group{State: Readonly}).Writable() || !(Group{State: Readonly}).Readable() || (Group{State: Unavailable}).Readable() {
		t.Fatal("state predicates")
	}
}
