package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// backlogBroker serves a backlog of messages on one subject, counting the
// pulls and acks, and refuses every ack (StatusBusy) if asked to.
type backlogBroker struct {
	*netserver.Server
	acks, pulls atomic.Int64              // pulls of the subject (not its retry subject)
	onAck       func(protocol.AckRequest) // if set, sees every ack request before its answer
	// ackDelay (nanoseconds), if set, answers each ack that much later,
	// off the connection's serve loop; ackOutstanding counts the messages
	// named by acks received and not yet answered, ackMaxOutstanding its
	// peak, ackAnswered those answered.
	ackDelay, ackOutstanding, ackMaxOutstanding, ackAnswered atomic.Int64
	// refuseLists answers list acks StatusBadRequest, as a broker that
	// predates them.
	refuseLists bool

	mu     sync.Mutex
	served int // pull seqs handed out
	total  int
}

func startBacklogBroker(t *testing.T, subject string, total int, refuseAcks bool, setup ...func(*backlogBroker)) *backlogBroker {
	t.Helper()
	b := &backlogBroker{total: total}
	for _, f := range setup {
		f(b) // before the server starts: its handlers read what f sets
	}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *netserver.Request) {
		req, err := protocol.DecodePullRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		if req.Subject == subject {
			b.pulls.Add(1) // not the retry subject's
		}
		var out []protocol.PulledMessage
		b.mu.Lock()
		for req.Subject == subject && len(out) < int(req.Max) && b.served < b.total {
			raw, err := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: fmt.Sprint("m", b.served),
				Created: time.Now()}, protocol.DefaultLimits)
			if err != nil {
				b.mu.Unlock()
				r.ReplyError(protocol.Errorf(protocol.StatusInternal, err.Error()))
				return
			}
			out = append(out, protocol.PulledMessage{PullSeq: uint64(b.served), ConsumeSeq: uint64(b.served), Message: raw})
			b.served++
		}
		b.mu.Unlock()
		if len(out) == 0 {
			time.Sleep(20 * time.Millisecond) // a short long poll
		}
		r.Reply(protocol.StatusOK, protocol.AppendPullResponse(nil, out))
	})
	mux.HandleFunc(protocol.CmdAck, func(r *netserver.Request) {
		b.acks.Add(1)
		a, err := protocol.DecodeAckRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		if b.onAck != nil {
			b.onAck(a)
		}
		if b.refuseLists && a.Flags&protocol.AckList != 0 {
			// As a broker that predates list acks: trailing bytes.
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, "ack request: trailing bytes"))
			return
		}
		named := int64(len(a.Seqs))
		if a.Flags&protocol.AckList == 0 && a.First <= a.Last {
			named = int64(a.Last - a.First + 1)
		}
		if d := time.Duration(b.ackDelay.Load()); d > 0 && !refuseAcks {
			n := b.ackOutstanding.Add(named)
			for m := b.ackMaxOutstanding.Load(); n > m && !b.ackMaxOutstanding.CompareAndSwap(m, n); m = b.ackMaxOutstanding.Load() {
			}
			time.AfterFunc(d, func() {
				b.ackAnswered.Add(named)
				b.ackOutstanding.Add(-named)
				r.Reply(protocol.StatusOK, nil)
			})
			return
		}
		if !refuseAcks {
			r.Reply(protocol.StatusOK, nil)
			return
		}
		r.ReplyError(protocol.Errorf(protocol.StatusBusy, "acks refused by the test"))
	})
	s, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	b.Server = s
	return b
}

// TestAckBackoff: acks that fail are retried after a back-off, not once per
// finished message (which, against a broker that was down, opened its
// breaker for the pulls too).
func TestAckBackoff(t *testing.T) {
	const total = 1000
	b := startBacklogBroker(t, "s", total, true)
	c, err := New(WithBrokers(b.Addr().String()), WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if _, err := c.Subscribe("s", "g", func(context.Context, *Message) error {
		handled.Add(1)
		time.Sleep(100 * time.Microsecond) // the messages finish over a few hundred ms
		return nil
	}, MaxUnacked(total)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitHandled(t, &handled, total)
	took := time.Since(start)
	acks := b.acks.Load()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx) // its final ack fails too
	// Back-offs of 50 ms, 100 ms, 200 ms, … up to 1 s: a handful over the
	// run, where one per finished message would be thousands.
	limit := int64(took/(50*time.Millisecond)) + 4
	t.Logf("%d messages handled in %v; %d acks tried (limit %d)", total, took, acks, limit)
	if acks > limit {
		t.Fatalf("%d acks tried in %v while the broker refused them", acks, took)
	}
}

// TestPullRefill: a subscription at its MaxUnacked bound pulls again once a
// batch (or half the bound) has room, not as soon as one message finished:
// with handlers slower than a round trip that asked for one message per
// pull, a pull per message.
func TestPullRefill(t *testing.T) {
	const total, batch = 400, 32
	b := startBacklogBroker(t, "s", total, false)
	c, err := New(WithBrokers(b.Addr().String()), WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var handled atomic.Int64
	if _, err := c.Subscribe("s", "g", func(context.Context, *Message) error {
		time.Sleep(time.Millisecond)
		handled.Add(1)
		return nil
	}, PullBatch(batch), MaxUnacked(2*batch)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitHandled(t, &handled, total)
	// A batch a pull, and a few that find the backlog drained (the test
	// broker holds those 20 ms).
	pulls := b.pulls.Load()
	limit := int64(total/batch) + 4
	t.Logf("%d messages in %v: %d pulls (limit %d), %d acks", total, time.Since(start), pulls, limit, b.acks.Load())
	if pulls > limit {
		t.Fatalf("%d pulls for %d messages in batches of %d", pulls, total, batch)
	}
}

// waitUntil polls cond every 5 ms until it reports done, and fails the
// test with cond's last state after d.
func waitUntil(t *testing.T, d time.Duration, cond func() (done bool, state string)) {
	t.Helper()
	start := time.Now()
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Since(start) > d {
			t.Fatal(state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitHandled waits (up to 20 s) until n messages were handled.
func waitHandled(t *testing.T, handled *atomic.Int64, n int64) {
	t.Helper()
	waitUntil(t, 20*time.Second, func() (bool, string) {
		h := handled.Load()
		return h >= n, fmt.Sprintf("%d of %d handled", h, n)
	})
}

// TestAckEach: with AckEach every message is acked on its own, named alone
// (a request names one pull seq, or lists several one by one: never a
// range), in pull-sequence order, several in flight at once (the test
// broker answers each ack 2 ms late: one at a time would take 400 ms for
// 200), and a message counts against MaxUnacked until its ack is answered
// (so no more than MaxUnacked are ever handled and not yet acked).
func TestAckEach(t *testing.T) {
	t.Run("lists", func(t *testing.T) { testAckEach(t, AckEach(), false) })
	t.Run("singly", func(t *testing.T) { testAckEach(t, AckEachSingly(), true) })
}

// testAckEach runs TestAckEach with opt; singly: every request names one
// pull seq.
func testAckEach(t *testing.T, opt SubscribeOption, singly bool) {
	const total, maxUnacked = 200, 32
	var mu sync.Mutex
	var named []uint64 // pull seqs named by acks, in the order sent
	var ranges int     // requests that acked a range of more than one
	var lists int      // requests that listed pull seqs
	b := startBacklogBroker(t, "s", total, false, func(b *backlogBroker) {
		b.ackDelay.Store(int64(2 * time.Millisecond))
		b.onAck = func(a protocol.AckRequest) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case a.Flags&protocol.AckList != 0:
				named = append(named, a.Seqs...)
				lists++
			case a.First < a.Last:
				ranges++
			case a.First == a.Last:
				named = append(named, a.First)
			}
		}
	})
	c, err := New(WithBrokers(b.Addr().String()), WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	var handled, worst atomic.Int64
	if _, err := c.Subscribe("s", "g", func(context.Context, *Message) error {
		n := handled.Add(1)
		ahead := n - b.ackAnswered.Load() // handled less acks answered
		if ahead > worst.Load() {
			worst.Store(ahead)
		}
		return nil
	}, opt, PullBatch(8), MaxUnacked(maxUnacked), Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	waitHandled(t, &handled, total)
	t.Logf("handled in %v (the test broker answers an empty pull of the retry subject after 20 ms, and acks queue behind it)", time.Since(t0))
	waitUntil(t, 20*time.Second, func() (bool, string) {
		mu.Lock()
		n := len(named)
		mu.Unlock()
		return n >= total && b.ackOutstanding.Load() == 0, fmt.Sprintf("%d of %d messages acked", n, total)
	})
	c.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if ranges > 0 {
		t.Fatalf("%d ack requests named a range", ranges)
	}
	if singly && lists > 0 {
		t.Fatalf("%d ack requests listed several pull seqs", lists)
	}
	if len(named) != total {
		t.Fatalf("acks named %d pull seqs for %d messages", len(named), total)
	}
	for i, seq := range named {
		if seq != uint64(i) {
			t.Fatalf("ack %d named pull seq %d, want %d", i, seq, i)
		}
	}
	peak := b.ackMaxOutstanding.Load()
	t.Logf("%d ack requests, up to %d acks in flight", b.acks.Load(), peak)
	if peak < 2 {
		t.Fatalf("at most %d ack in flight: not pipelined", peak)
	}
	if peak > maxUnacked {
		t.Fatalf("%d acks in flight, MaxUnacked %d", peak, maxUnacked)
	}
	if w := worst.Load(); w > maxUnacked {
		t.Fatalf("%d messages handled ahead of their answered acks, MaxUnacked %d", w, maxUnacked)
	}
}

// TestAckEachOldBroker: a broker that predates list acks answers them
// StatusBadRequest; the consumer then acks one request per message, the
// refused ones sent again at once, and every message is acked.
func TestAckEachOldBroker(t *testing.T) {
	const total = 300
	var mu sync.Mutex
	acked := map[uint64]int{}
	lists := 0
	b := startBacklogBroker(t, "s", total, false, func(b *backlogBroker) {
		b.refuseLists = true
		b.onAck = func(a protocol.AckRequest) {
			if a.Flags&protocol.AckList != 0 {
				mu.Lock()
				lists++
				mu.Unlock()
			}
			if a.Flags&protocol.AckList == 0 && a.First <= a.Last {
				mu.Lock()
				for s := a.First; s <= a.Last; s++ {
					acked[s]++
				}
				mu.Unlock()
			}
		}
	})
	c, err := New(WithBrokers(b.Addr().String()), WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if _, err := c.Subscribe("s", "g", func(context.Context, *Message) error {
		handled.Add(1)
		time.Sleep(10 * time.Microsecond)
		return nil
	}, AckEach(), PullBatch(32), MaxUnacked(64)); err != nil {
		t.Fatal(err)
	}
	waitHandled(t, &handled, total)
	waitUntil(t, 10*time.Second, func() (bool, string) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		return n == total, fmt.Sprintf("%d of %d messages acked", n, total)
	})
	c.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d list acks refused", lists)
	if lists == 0 {
		t.Fatal("no list ack sent: the fallback was not exercised")
	}
	for s, n := range acked {
		if n != 1 {
			t.Fatalf("pull seq %d acked %d times", s, n)
		}
	}
}

// TestAckEachBackoff: with AckEach, acks that fail are sent again after
// the back-off, not once per finished message, and Close does not wait
// for them forever.
func TestAckEachBackoff(t *testing.T) {
	const total = 500
	b := startBacklogBroker(t, "s", total, true)
	c, err := New(WithBrokers(b.Addr().String()), WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if _, err := c.Subscribe("s", "g", func(context.Context, *Message) error {
		handled.Add(1)
		return nil
	}, AckEach(), MaxUnacked(2*total)); err != nil { // room for all: none is ever acked
		t.Fatal(err)
	}
	start := time.Now()
	waitHandled(t, &handled, total)
	time.Sleep(300 * time.Millisecond) // a few back-offs
	took := time.Since(start)
	acks := b.acks.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	closeStart := time.Now()
	c.Close(ctx) // its final acks fail too
	limit := int64(took/(50*time.Millisecond)) + 4
	t.Logf("%d messages handled; %d acks tried in %v (limit %d); Close took %v", total, acks, took, limit, time.Since(closeStart))
	if acks > limit {
		t.Fatalf("%d acks tried in %v while the broker refused them", acks, took)
	}
}
