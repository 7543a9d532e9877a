package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// ackWatch is a TCP proxy in front of a broker that reads the frames going
// through: the pull seqs named by the acks of one subject, in the order
// sent, the acks that named a range instead, and how many acks were in
// flight (sent, not yet answered) at most.
type ackWatch struct {
	ln      net.Listener
	target  string
	subject string

	mu       sync.Mutex
	named    []uint64       // pull seqs named by acks of subject, in order
	ranges   int            // acks of subject that named a range
	requests int            // non-empty acks of subject
	pending  map[uint64]int // request id → acks it carries, until answered
	inflight int            // acks sent, not yet answered
	peak     int
}

func startAckWatch(t *testing.T, target, subject string) *ackWatch {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &ackWatch{ln: ln, target: target, subject: subject, pending: map[uint64]int{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go w.copyFrames(out, in, true)
			go w.copyFrames(in, out, false)
		}
	}()
	return w
}

// copyFrames forwards whole frames from src to dst, watching acks
// (requests when toBroker, else their answers).
func (w *ackWatch) copyFrames(dst, src net.Conn, toBroker bool) {
	defer dst.Close()
	defer src.Close()
	br, bw := bufio.NewReaderSize(src, 64<<10), bufio.NewWriterSize(dst, 64<<10)
	hb := make([]byte, protocol.HeaderSize)
	var body []byte
	for {
		if _, err := io.ReadFull(br, hb); err != nil {
			return
		}
		h, err := protocol.ParseHeader(hb, protocol.DefaultMaxFrameSize)
		if err != nil {
			return
		}
		if cap(body) < int(h.BodyLen) {
			body = make([]byte, h.BodyLen)
		}
		body = body[:h.BodyLen]
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		w.mu.Lock()
		switch {
		case toBroker && !h.IsResponse() && h.Command() == protocol.CmdAck:
			a, err := protocol.DecodeAckRequest(body)
			if err != nil || a.Subject != w.subject {
				break
			}
			n := len(a.Seqs)
			switch {
			case n > 0:
				w.named = append(w.named, a.Seqs...)
			case a.First < a.Last:
				w.ranges++
			case a.First == a.Last:
				w.named, n = append(w.named, a.First), 1
			}
			if n > 0 {
				w.requests++
				w.pending[h.RequestID] = n
				w.inflight += n
				w.peak = max(w.peak, w.inflight)
			}
		case !toBroker && h.IsResponse():
			w.inflight -= w.pending[h.RequestID]
			delete(w.pending, h.RequestID)
		}
		w.mu.Unlock()
		bw.Write(hb)
		bw.Write(body)
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// TestAckEachBroker: against a real broker, per-message acks from handlers
// that finish out of order (Concurrency 4) go out each naming one message
// (alone, or listed one by one with others ready at the same time; never a
// range), in pull-seq order, many in flight at once, and the broker
// applies them in order: every message is delivered once and the broker
// never takes an ack as one above a lost ack (which would send the
// messages below it to the retry subject).
func TestAckEachBroker(t *testing.T) {
	const total = 3000
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = "127.0.0.1:0", "", t.TempDir(), 8<<20
	o.RetryDelay = 10 * time.Millisecond // a retried message would come back at once
	b, err := realtime.New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	addr := b.Addr().String()
	watch := startAckWatch(t, addr, "s")

	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		if err := p.SendAsync(&producer.Message{Subject: "s", Body: []byte(fmt.Sprint(i))}, func(_ *producer.Message, err error) {
			if err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	c, err := consumer.New(consumer.WithBrokers(watch.ln.Addr().String()), consumer.WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("s", "g", func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		seen[string(m.Body)]++
		mu.Unlock()
		return nil
	}, consumer.AckEach(), consumer.StartEarliest(), consumer.Concurrency(4), consumer.PullBatch(64), consumer.MaxUnacked(256)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages received", n, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for body, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", body, n)
		}
	}
	mu.Unlock()
	mfs, err := b.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "qmq_realtime_messages_lost_ack_retried_total" {
			continue
		}
		found = true
		if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 0 {
			t.Errorf("the broker took %v acks as lost and retried their messages", v)
		}
	}
	if !found {
		t.Fatal("no qmq_realtime_messages_lost_ack_retried_total metric")
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if watch.ranges > 0 {
		t.Fatalf("%d ack requests named a range", watch.ranges)
	}
	if len(watch.named) != total {
		t.Fatalf("acks named %d pull seqs for %d messages", len(watch.named), total)
	}
	for i, seq := range watch.named {
		if i > 0 && seq != watch.named[i-1]+1 {
			t.Fatalf("ack %d named pull seq %d after %d", i, seq, watch.named[i-1])
		}
	}
	t.Logf("%d ack requests, up to %d acks in flight", watch.requests, watch.peak)
	if watch.peak < 2 {
		t.Fatalf("at most %d ack in flight: not pipelined", watch.peak)
	}
}
