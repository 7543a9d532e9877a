package realtime_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/realtime"
)

// rawConsumer pulls and acks with raw requests on a transport of its own
// (its own connection).
type rawConsumer struct {
	t     *testing.T
	tr    *transport.Client
	addr  string
	id    string
	known int64 // highest pull seq received
	body  []byte
}

func newRawConsumer(t *testing.T, addr, id string) *rawConsumer {
	t.Helper()
	tr, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return &rawConsumer{t: t, tr: tr, addr: addr, id: id, known: -1}
}

// pull takes up to max messages of subject "acks", group "g" (waiting at
// most wait); it returns their pull seqs and message ids.
func (c *rawConsumer) pull(max int, wait time.Duration) (seqs []uint64, ids []string, err error) {
	req := protocol.PullRequest{Subject: "acks", Group: "g", ConsumerID: c.id, Max: uint32(max), Timeout: wait,
		Flags: protocol.PullEarliest, KnownPullSeq: c.known}
	resp, err := c.tr.Call(context.Background(), c.addr, protocol.CmdPull, protocol.AppendPullRequest(nil, &req))
	if err != nil {
		return nil, nil, err
	}
	items, err := protocol.DecodePullResponse(resp)
	if err != nil {
		return nil, nil, err
	}
	for _, it := range items {
		m, err := protocol.DecodeMessage(it.Message)
		if err != nil {
			return nil, nil, err
		}
		seqs, ids = append(seqs, it.PullSeq), append(ids, m.ID)
		c.known = max64(c.known, int64(it.PullSeq))
	}
	return seqs, ids, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (c *rawConsumer) ackBody(first, last uint64) []byte {
	req := protocol.AckRequest{Subject: "acks", Group: "g", ConsumerID: c.id, First: first, Last: last}
	c.body = protocol.AppendAckRequest(c.body[:0], &req)
	return c.body
}

// ackRange acks first..last and waits for the answer.
func (c *rawConsumer) ackRange(first, last uint64) error {
	_, err := c.tr.Call(context.Background(), c.addr, protocol.CmdAck, c.ackBody(first, last))
	return err
}

// ackEachPipelined sends one ack per pull seq, in order, all in flight at
// once, and waits for every answer.
func (c *rawConsumer) ackEachPipelined(seqs []uint64) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, seq := range seqs {
		wg.Add(1)
		if err := c.tr.Go(c.addr, protocol.CmdAck, c.ackBody(seq, seq), 30*time.Second, func(_ []byte, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("ack of pull seq %d: %w", seq, err)
				}
				mu.Unlock()
			}
			wg.Done()
		}); err != nil {
			wg.Done()
			return err
		}
	}
	wg.Wait()
	return firstErr
}

// TestBroker_PipelinedAcksKeepOrder: a consumer that sends many
// single-message acks at once, in pull-sequence order, while other
// consumers of its group keep the group's lock busy with their pulls, has
// its acks applied in the order they arrived: none is taken as an ack
// above a lost one (no message goes to the retry subject) and every message
// is delivered once.
func TestBroker_PipelinedAcksKeepOrder(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.RetryDelay = 10 * time.Millisecond; o.InlinePulls = false })
	p := newProducer(t, b.addr())
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	note := func(ids []string) {
		mu.Lock()
		for _, id := range ids {
			seen[id]++
		}
		mu.Unlock()
	}
	sent := 0
	// Rounds until the broker queued enough acks behind detached ones
	// (the contention this test is about), at least three.
	const wantQueued = 300
	for round := 0; round < 3 || counterValue(t, b.Registry(), "qmq_realtime_acks_queued_total") < wantQueued; round++ {
		if round == 40 {
			t.Fatalf("%v acks queued in 40 rounds: the group's lock was seldom contended",
				counterValue(t, b.Registry(), "qmq_realtime_acks_queued_total"))
		}
		const perRound = 20000
		sendN(t, p, "acks", perRound, nil)
		sent += perRound

		// Contenders: other consumers of the group pulling small batches
		// (each pull takes the group's lock) and acking them as ranges.
		var stop atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := range 6 {
			c := newRawConsumer(t, b.addr(), fmt.Sprint("contender", round, "-", i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					seqs, ids, err := c.pull(1000, 5*time.Millisecond)
					if err != nil {
						errs <- err
						return
					}
					note(ids)
					if len(seqs) > 0 {
						if err := c.ackRange(seqs[0], seqs[len(seqs)-1]); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		// The consumer under test: acks each message of a batch with a
		// request of its own, all in flight, while its pull of the next
		// batch (up to 500) is in flight too, until the round's messages
		// are gone.
		c := newRawConsumer(t, b.addr(), fmt.Sprint("pipeliner", round))
		type answer struct {
			seqs []uint64
			ids  []string
			err  error
		}
		var held []uint64
		for {
			next := make(chan answer, 1)
			go func() {
				seqs, ids, err := c.pull(500, 5*time.Millisecond)
				next <- answer{seqs, ids, err}
			}()
			if err := c.ackEachPipelined(held); err != nil {
				t.Fatal(err)
			}
			a := <-next
			if a.err != nil {
				t.Fatal(a.err)
			}
			note(a.ids)
			for i := 1; i < len(a.seqs); i++ {
				if a.seqs[i] != a.seqs[i-1]+1 {
					t.Fatalf("pull seqs not consecutive: %d after %d", a.seqs[i], a.seqs[i-1])
				}
			}
			if len(a.seqs) == 0 && len(held) == 0 {
				break
			}
			held = a.seqs
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if v := counterValue(t, b.Registry(), "qmq_realtime_messages_lost_ack_retried_total"); v != 0 {
			t.Fatalf("round %d: %v messages went to the retry subject as lost acks", round, v)
		}
	}
	t.Logf("%v acks queued behind a detached one", counterValue(t, b.Registry(), "qmq_realtime_acks_queued_total"))

	// Every message once: no duplicates, none missing, and nothing comes
	// back to the group (a retry would be due after 10 ms).
	time.Sleep(50 * time.Millisecond)
	late := newRawConsumer(t, b.addr(), "late")
	if seqs, _, err := late.pull(100, 200*time.Millisecond); err != nil || len(seqs) != 0 {
		t.Fatalf("a pull after the run got %d messages (err %v)", len(seqs), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != sent {
		t.Fatalf("%d distinct messages delivered of %d sent", len(seen), sent)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %s delivered %d times", id, n)
		}
	}
}

// ackList acks each of seqs, listed one by one in one request
// (protocol.AckList), and waits for the answer.
func (c *rawConsumer) ackList(seqs ...uint64) error {
	req := protocol.AckRequest{Subject: "acks", Group: "g", ConsumerID: c.id, Flags: protocol.AckList, Seqs: seqs}
	_, err := c.tr.Call(context.Background(), c.addr, protocol.CmdAck, protocol.AppendAckRequest(nil, &req))
	return err
}

// TestBroker_ListAcks: a request listing pull seqs acks each as if it had
// come alone, in the order listed: consecutive ones (inline), and a list
// that skips one, whose skipped message is taken as a lost ack and goes to
// the retry subject, as a single ack above it would send it.
func TestBroker_ListAcks(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.RetryDelay = time.Hour })
	p := newProducer(t, b.addr())
	sendN(t, p, "acks", 10, nil)
	c := newRawConsumer(t, b.addr(), "c1")
	seqs, _, err := c.pull(10, time.Second)
	if err != nil || len(seqs) != 10 {
		t.Fatalf("pulled %d: %v", len(seqs), err)
	}
	acks := func() float64 { return counterValue(t, b.Registry(), "qmq_realtime_acks_total") }
	lost := func() float64 { return counterValue(t, b.Registry(), "qmq_realtime_messages_lost_ack_retried_total") }
	if err := c.ackList(seqs[0], seqs[1], seqs[2]); err != nil {
		t.Fatal(err)
	}
	if a, l := acks(), lost(); a != 3 || l != 0 {
		t.Fatalf("after 3 listed acks: %v acks, %v lost", a, l)
	}
	// seqs[4] skipped: lost. A duplicate of seqs[2] first changes nothing.
	if err := c.ackList(seqs[2], seqs[3], seqs[5], seqs[6]); err != nil {
		t.Fatal(err)
	}
	if l := lost(); l != 1 {
		t.Fatalf("a list that skipped one: %v messages retried as lost acks, want 1", l)
	}
	if err := c.ackList(seqs[7], seqs[8], seqs[9]); err != nil {
		t.Fatal(err)
	}
	if a, l := acks(), lost(); a != 10 || l != 1 {
		t.Fatalf("at the end: %v acks (want 10), %v lost (want 1)", a, l)
	}
	// Nothing un-acked is left: a new consumer of the group gets nothing.
	other := newRawConsumer(t, b.addr(), "c2")
	if got, _, err := other.pull(10, 100*time.Millisecond); err != nil || len(got) != 0 {
		t.Fatalf("a second consumer got %d messages (err %v)", len(got), err)
	}
}
