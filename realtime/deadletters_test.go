package realtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/realtime"
)

func deadLetters(t *testing.T, tc *transport.Client, addr string, q protocol.DeadLettersRequest) protocol.DeadLettersResponse {
	t.Helper()
	resp, err := tc.Call(context.Background(), addr, protocol.CmdDeadLetters, protocol.AppendDeadLettersRequest(nil, &q))
	if err != nil {
		t.Fatalf("dead letters %v: %v", q.Action, err)
	}
	dl, err := protocol.DecodeDeadLettersResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

// Dead letters can be listed, re-driven (back to the group, with a fresh
// attempt count) and purged, and what was removed stays removed across a
// restart.
func TestBroker_DeadLetterRedriveAndPurge(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	var healthy atomic.Bool
	var mu sync.Mutex
	handled := map[string]int{}
	if _, err := c.Subscribe("jobs", "w", func(ctx context.Context, m *consumer.Message) error {
		if !healthy.Load() {
			return errors.New("down")
		}
		mu.Lock()
		handled[m.ID]++
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	ids := sendN(t, p, "jobs", 5, nil)
	tc, _ := transport.New(fastTransport, nil)
	defer tc.Close()
	list := protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: "jobs", Group: "w"}
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if dl := deadLetters(t, tc, b.addr(), list); dl.Total != 5 {
			return fmt.Errorf("%d dead letters", dl.Total)
		}
		return nil
	})
	// Re-drive two of them: the group gets them again.
	healthy.Store(true)
	dl := deadLetters(t, tc, b.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersRedrive, Subject: "jobs", Group: "w", IDs: ids[:2]})
	if dl.Affected != 2 || dl.Total != 3 {
		t.Fatalf("re-drive: affected %d, total %d", dl.Affected, dl.Total)
	}
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if handled[ids[0]] != 1 || handled[ids[1]] != 1 {
			return fmt.Errorf("re-driven letters handled %d and %d times", handled[ids[0]], handled[ids[1]])
		}
		return nil
	})
	// Inspect one, purge one by id, then the rest.
	dl = deadLetters(t, tc, b.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersInspect, Subject: "jobs", Group: "w", IDs: ids[2:3]})
	if len(dl.Letters) != 1 {
		t.Fatalf("inspect found %d", len(dl.Letters))
	}
	if m, _ := protocol.DecodeMessage(dl.Letters[0].Message); m.ID != ids[2] {
		t.Fatalf("inspect returned %s", m.ID)
	}
	dl = deadLetters(t, tc, b.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersPurge, Subject: "jobs", Group: "w", IDs: ids[2:3]})
	if dl.Affected != 1 || dl.Total != 2 {
		t.Fatalf("purge one: affected %d, total %d", dl.Affected, dl.Total)
	}
	// Removals survive a restart.
	addr := b.addr()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, func(o *realtime.Options) { o.Addr = addr })
	if dl := deadLetters(t, tc, b2.addr(), list); dl.Total != 2 || len(dl.Letters) != 2 {
		t.Fatalf("after restart: total %d, listed %d", dl.Total, len(dl.Letters))
	}
	dl = deadLetters(t, tc, b2.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersPurge, Subject: "jobs", Group: "w"})
	if dl.Affected != 2 || dl.Total != 0 {
		t.Fatalf("purge all: affected %d, total %d", dl.Affected, dl.Total)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids[2:] {
		if handled[id] != 0 {
			t.Fatalf("purged letter %s was handled", id)
		}
	}
}
