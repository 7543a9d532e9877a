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

// refusingBroker serves a backlog of messages on one subject and refuses
// every ack (StatusBusy), counting them.
type refusingBroker struct {
	*netserver.Server
	acks atomic.Int64

	mu     sync.Mutex
	served int // pull seqs handed out
	total  int
}

func startRefusingBroker(t *testing.T, subject string, total int) *refusingBroker {
	t.Helper()
	b := &refusingBroker{total: total}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *netserver.Request) {
		req, err := protocol.DecodePullRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
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
	b := startRefusingBroker(t, "s", total)
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
	for handled.Load() < total {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d of %d handled", handled.Load(), total)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
