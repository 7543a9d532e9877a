package realtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// deadLetterSetup subscribes a group whose handler always fails with
// MaxAttempts 1, sends n messages and waits until all n are dead letters;
// the consumer is closed before it returns.
func deadLetterSetup(t *testing.T, tc *transport.Client, b *testBroker, n int) []string {
	t.Helper()
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	if _, err := c.Subscribe("jobs", "w", func(ctx context.Context, m *consumer.Message) error {
		return errors.New("down")
	}, consumer.StartEarliest(), consumer.MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	ids := sendN(t, p, "jobs", n, nil)
	list := protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: "jobs", Group: "w"}
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if dl := deadLetters(t, tc, b.addr(), list); dl.Total != uint64(n) {
			return fmt.Errorf("%d dead letters", dl.Total)
		}
		return nil
	})
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ids
}

// listedIDs lists a group's dead letters and returns their ids.
func listedIDs(t *testing.T, tc *transport.Client, addr string) (map[string]bool, uint64) {
	t.Helper()
	dl := deadLetters(t, tc, addr, protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: "jobs", Group: "w"})
	ids := map[string]bool{}
	for _, l := range dl.Letters {
		m, err := protocol.DecodeMessage(l.Message)
		if err != nil {
			t.Fatal(err)
		}
		ids[m.ID] = true
	}
	return ids, dl.Total
}

// Removals are recorded in the log (tombstones in the dead subject), so a
// slave promoted to master knows what its master purged and re-drove.
func TestReplication_DeadLetterRemovalsReachThePromotedSlave(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := startBroker(t, mdir, replOptions)
	s := startSlave(t, sdir, m.addr())
	tc := newClient(t)
	ids := deadLetterSetup(t, tc, m, 4)
	dl := deadLetters(t, tc, m.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersPurge, Subject: "jobs", Group: "w", IDs: ids[:1]})
	if dl.Affected != 1 || dl.Total != 3 {
		t.Fatalf("purge one: affected %d, total %d", dl.Affected, dl.Total)
	}
	dl = deadLetters(t, tc, m.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersRedrive, Subject: "jobs", Group: "w", IDs: ids[1:2]})
	if dl.Affected != 1 || dl.Total != 2 {
		t.Fatalf("re-drive one: affected %d, total %d", dl.Affected, dl.Total)
	}
	waitCaughtUp(t, m, 20*time.Second)
	for _, b := range []*testBroker{s, m} {
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	promoted := startBroker(t, sdir, replOptions)
	got, total := listedIDs(t, tc, promoted.addr())
	if total != 2 || len(got) != 2 || !got[ids[2]] || !got[ids[3]] {
		t.Fatalf("promoted slave lists %v (total %d), want %v", got, total, ids[2:])
	}
	// Its own removals are recorded in its log the same way: a purge of the
	// rest holds across its restart.
	dl = deadLetters(t, tc, promoted.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersPurge, Subject: "jobs", Group: "w"})
	if dl.Affected != 2 || dl.Total != 0 {
		t.Fatalf("purge all: affected %d, total %d", dl.Affected, dl.Total)
	}
	addr := promoted.addr()
	if err := promoted.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := startBroker(t, sdir, replOptions, func(o *realtime.Options) { o.Addr = addr })
	if got, total := listedIDs(t, tc, again.addr()); total != 0 || len(got) != 0 {
		t.Fatalf("after restart: %v (total %d)", got, total)
	}
}

// A data directory from before tombstones keeps its removals in
// deadletters.json: they still hold.
func TestBroker_DeadLettersLegacyFileStillRead(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	tc := newClient(t)
	ids := deadLetterSetup(t, tc, b, 3)
	dl := deadLetters(t, tc, b.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersInspect, Subject: "jobs", Group: "w", IDs: ids[:1]})
	if len(dl.Letters) != 1 {
		t.Fatalf("inspect found %d", len(dl.Letters))
	}
	addr := b.addr()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	legacy := fmt.Sprintf(`{%q:{"through":0,"removed":{"%d":true}}}`, protocol.DeadSubject("jobs", "w"), dl.Letters[0].Seq)
	if err := os.WriteFile(filepath.Join(dir, "deadletters.json"), []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, func(o *realtime.Options) { o.Addr = addr })
	if got, total := listedIDs(t, tc, b2.addr()); total != 2 || got[ids[0]] || !got[ids[1]] || !got[ids[2]] {
		t.Fatalf("with the legacy record: %v (total %d), want %v", got, total, ids[1:])
	}
}

// A purge of everything removes only the letters there were: letters that
// die after it are listed, and a tombstone is never one of them.
func TestBroker_DeadLettersAfterPurgeAll(t *testing.T) {
	b := startBroker(t, t.TempDir())
	tc := newClient(t)
	deadLetterSetup(t, tc, b, 3)
	dl := deadLetters(t, tc, b.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersPurge, Subject: "jobs", Group: "w"})
	if dl.Affected != 3 || dl.Total != 0 {
		t.Fatalf("purge all: affected %d, total %d", dl.Affected, dl.Total)
	}
	ids := deadLetterSetup(t, tc, b, 2) // two more die (deadLetterSetup waits for a total of 2)
	got, total := listedIDs(t, tc, b.addr())
	if total != 2 || len(got) != 2 || !got[ids[0]] || !got[ids[1]] {
		t.Fatalf("after the purge: %v (total %d), want %v", got, total, ids)
	}
	for id := range got {
		if strings.HasPrefix(id, "qmq-tombstone-") {
			t.Fatalf("a tombstone is listed: %s", id)
		}
	}
}
