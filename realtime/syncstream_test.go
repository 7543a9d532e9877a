package realtime_test

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"github.com/qmq-go/qmq/realtime/store"
)

// rawFetch sends one sync fetch (cmd: CmdSyncLog or CmdSyncLogAhead) and
// returns a channel for its decoded answer.
func rawFetch(t *testing.T, c *transport.Client, addr string, cmd protocol.Command, q protocol.SyncRequest) <-chan syncAnswer {
	t.Helper()
	q.Group, q.MessageSegmentSize, q.ActionSegmentSize = "rt1", replSegment, store.DefaultOptions.ActionSegmentSize
	if q.WaitMillis == 0 {
		q.WaitMillis = 5000
	}
	ch := make(chan syncAnswer, 1)
	if err := c.Go(addr, cmd, protocol.AppendSyncRequest(nil, &q), 20*time.Second, func(body []byte, err error) {
		if err != nil {
			ch <- syncAnswer{err: err}
			return
		}
		p, err := protocol.DecodeSyncResponse(body)
		ch <- syncAnswer{p: p, err: err}
	}); err != nil {
		t.Fatal(err)
	}
	return ch
}

type syncAnswer struct {
	p   protocol.SyncResponse
	err error
}

func (a syncAnswer) end() int64 { return a.p.Message.Offset + int64(len(a.p.Message.Data)) }

func answerOf(t *testing.T, ch <-chan syncAnswer) syncAnswer {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("no sync answer")
	}
	panic("unreachable")
}

// Pipelined fetches (CmdSyncLogAhead) are answered in the order they were
// sent, each from where the one before it ended, whatever offsets they
// name; one parked at the master is answered as soon as a record is
// written. A pipelined fetch on a connection without a CmdSyncLog fetch
// before it is refused.
func TestSyncStream_PipelinedFetchesInOrder(t *testing.T) {
	m := startBroker(t, t.TempDir(), replOptions)
	p := newProducer(t, m.addr())
	sendN(t, p, "orders", 300, func(i int, msg *producer.Message) { msg.Body = make([]byte, 500) })
	end := m.Replication().MessageEnd
	c := newClient(t)
	first := rawFetch(t, c, m.addr(), protocol.CmdSyncLog, protocol.SyncRequest{MaxBytes: 8 << 10})
	var ahead []<-chan syncAnswer
	for range 3 {
		// Offsets as a slave that has received nothing yet names them.
		ahead = append(ahead, rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 8 << 10}))
	}
	a := answerOf(t, first)
	if a.p.Message.Offset != 0 || len(a.p.Message.Data) == 0 || a.end() >= end {
		t.Fatalf("first answer: %d bytes at %d (log ends at %d)", len(a.p.Message.Data), a.p.Message.Offset, end)
	}
	pos := a.end()
	for i, ch := range ahead {
		a := answerOf(t, ch)
		if a.p.Message.Offset != pos || len(a.p.Message.Data) == 0 {
			t.Fatalf("pipelined answer %d: %d bytes at %d, the one before ended at %d", i, len(a.p.Message.Data), a.p.Message.Offset, pos)
		}
		pos = a.end()
	}
	// The rest, one pipelined fetch at a time, up to the end.
	for pos < end {
		a := answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 64 << 10}))
		if a.p.Message.Offset != pos {
			t.Fatalf("pipelined answer at %d, the one before ended at %d", a.p.Message.Offset, pos)
		}
		pos = a.end()
	}
	if pos != end {
		t.Fatalf("the stream ended at %d, the log at %d", pos, end)
	}
	// Two parked fetches: a write answers the first at once, from the end.
	parked := rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 64 << 10})
	next := rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 64 << 10})
	select {
	case a := <-parked:
		t.Fatalf("a fetch with nothing new was answered at once: %+v", a)
	case <-time.After(100 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := time.Now()
	if err := rawSend(ctx, c, m.addr(), "orders", "pushed"); err != nil {
		t.Fatal(err)
	}
	a = answerOf(t, parked)
	if a.p.Message.Offset != end || len(a.p.Message.Data) == 0 {
		t.Fatalf("parked fetch: %d bytes at %d, want the new record at %d", len(a.p.Message.Data), a.p.Message.Offset, end)
	}
	if d := time.Since(sent); d > 4*time.Second {
		t.Fatalf("the parked fetch was answered %v after the send", d)
	}
	select {
	case a := <-next:
		if len(a.p.Message.Data) > 0 {
			t.Fatalf("the fetch after it was answered with %d bytes at %d", len(a.p.Message.Data), a.p.Message.Offset)
		}
	case <-time.After(100 * time.Millisecond):
	}

	// A fresh connection has no stream.
	c2 := newClient(t)
	if a := <-rawFetch(t, c2, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 1 << 20}); protocol.StatusOf(a.err) != protocol.StatusBadRequest {
		t.Fatalf("pipelined fetch without a stream: %v", a.err)
	}
}

// A slave that reconnects mid-stream asks again from what it received: a
// fresh CmdSyncLog restarts the stream there, and what an older stream's
// fetches answer later does not move the new one.
func TestSyncStream_ReconnectResumesAtTheOffsetAskedFor(t *testing.T) {
	m := startBroker(t, t.TempDir(), replOptions)
	p := newProducer(t, m.addr())
	sendN(t, p, "orders", 200, func(i int, msg *producer.Message) { msg.Body = make([]byte, 500) })
	end := m.Replication().MessageEnd
	c := newClient(t)
	a := answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLog, protocol.SyncRequest{MaxBytes: 8 << 10}))
	got := a.end()
	// Two more in flight, then the connection goes.
	rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 8 << 10})
	rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 8 << 10})
	c.Close()
	c = newClient(t)
	a = answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLog, protocol.SyncRequest{MessageOffset: got, MaxBytes: 8 << 10}))
	if a.p.Message.Offset != got {
		t.Fatalf("resumed at %d, asked from %d", a.p.Message.Offset, got)
	}
	pos := a.end()
	// A stale fetch of the same connection (a CmdSyncLog from before)
	// restarts the stream where it asks.
	a = answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLog, protocol.SyncRequest{MessageOffset: got, MaxBytes: 8 << 10}))
	if a.p.Message.Offset != got {
		t.Fatalf("restarted at %d, asked from %d", a.p.Message.Offset, got)
	}
	pos = a.end()
	for pos < end {
		a := answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MessageOffset: got, MaxBytes: 64 << 10}))
		if a.p.Message.Offset != pos {
			t.Fatalf("pipelined answer at %d, the one before ended at %d", a.p.Message.Offset, pos)
		}
		pos = a.end()
	}
}

// A cut (a restarted master's tail: see
// TestReplication_RestartedMasterCutsCopiesPastItsEnd) answers the fetch
// that asks past it and every later fetch of its stream, whatever offsets
// they name (sent before the slave heard of the cut, some may name offsets
// at or below it while answers before them carried records past it); a
// CmdSyncLog from the cut restarts the stream there.
func TestSyncStream_CutRestartsTheStream(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := restartedMaster(ctx, t, c)
	recovered := m.Replication().MessageEnd
	past := recovered + 1000
	first := rawFetch(t, c, m.addr(), protocol.CmdSyncLog, protocol.SyncRequest{MessageOffset: past, MessageDurable: past, MaxBytes: 1 << 20})
	second := rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MessageOffset: past, MessageDurable: past, MaxBytes: 1 << 20})
	third := rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MaxBytes: 1 << 20})
	for i, ch := range []<-chan syncAnswer{first, second, third} {
		if a := answerOf(t, ch); a.p.Cut != recovered || len(a.p.Message.Data) != 0 {
			t.Fatalf("fetch %d of the stream: cut %d (want %d), %d bytes", i, a.p.Cut, recovered, len(a.p.Message.Data))
		}
	}
	for i := range 20 {
		if err := rawSend(ctx, c, m.addr(), "x", fmt.Sprint("b", i)); err != nil {
			t.Fatal(err)
		}
	}
	if a := answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MessageOffset: recovered, MessageDurable: recovered, MaxBytes: 1 << 20, Generation: 1})); a.p.Cut != recovered {
		t.Fatalf("a pipelined fetch of the cut stream: cut %d", a.p.Cut)
	}
	if got := m.Replication().SlaveOffset; got > recovered {
		t.Fatalf("the master counts the copy durable up to %d, past the cut %d", got, recovered)
	}
	// Cut back, the copy restarts the stream from the cut.
	end := m.Replication().MessageEnd
	a := answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLog, protocol.SyncRequest{MessageOffset: recovered, MessageDurable: recovered, MaxBytes: 1 << 20, Generation: 1}))
	if a.p.Cut != -1 || a.p.Message.Offset != recovered || a.end() != end {
		t.Fatalf("fetch from the cut: cut %d, %d bytes at %d, master ends at %d", a.p.Cut, len(a.p.Message.Data), a.p.Message.Offset, end)
	}
	// And on from there, whatever the offsets it names.
	if err := rawSend(ctx, c, m.addr(), "x", "c"); err != nil {
		t.Fatal(err)
	}
	a = answerOf(t, rawFetch(t, c, m.addr(), protocol.CmdSyncLogAhead, protocol.SyncRequest{MessageOffset: recovered, MessageDurable: recovered, MaxBytes: 1 << 20, Generation: 1}))
	if a.p.Cut != -1 || a.p.Message.Offset != end || a.end() != m.Replication().MessageEnd {
		t.Fatalf("fetch after it: cut %d, %d bytes at %d, want from %d", a.p.Cut, len(a.p.Message.Data), a.p.Message.Offset, end)
	}
}

// syncProxy stands in front of a master and forwards the sync commands.
// old: it plays a master without CmdSyncLogAhead, answering that one
// StatusUnknownCommand (counted in n). Otherwise it turns the fifth
// pipelined answer with records into a cut at the answer's offset (the
// copy's end: nothing to cut, but the fetches in flight must be dropped
// and the stream restarted there), counted in n.
func syncProxy(t *testing.T, master string, old bool) (addr string, n *atomic.Int64) {
	t.Helper()
	c := newClient(t)
	n = new(atomic.Int64)
	var withData atomic.Int64
	mux := netserver.NewMux()
	// Forwarded on the event loop, in the order they came (c.Go queues
	// without waiting once the connection is up).
	forward := func(cmd protocol.Command) netserver.HandlerFunc {
		return func(r *netserver.Request) {
			body := append([]byte(nil), r.Body...)
			if r.Header.IsOneWay() {
				_ = c.Go(master, cmd, body, 30*time.Second, func([]byte, error) {})
				return
			}
			d := r.Detach()
			err := c.Go(master, cmd, body, 30*time.Second, func(resp []byte, err error) {
				if err != nil {
					d.ReplyError(err)
					return
				}
				if p, err := protocol.DecodeSyncResponse(resp); cmd == protocol.CmdSyncLogAhead && err == nil && len(p.Message.Data) > 0 && withData.Add(1) == 5 {
					p.Cut, p.Message.Data, p.Action.Data, p.Action.Offset = p.Message.Offset, nil, nil, p.Action.Start
					resp = protocol.AppendSyncResponse(nil, &p)
					n.Add(1)
				}
				d.Reply(protocol.StatusOK, resp)
			})
			if err != nil {
				d.ReplyError(err)
			}
		}
	}
	mux.HandleInline(protocol.CmdSyncLog, forward(protocol.CmdSyncLog))
	mux.HandleInline(protocol.CmdSyncEpoch, forward(protocol.CmdSyncEpoch))
	if old {
		mux.HandleFunc(protocol.CmdSyncLogAhead, func(r *netserver.Request) {
			n.Add(1)
			r.ReplyError(protocol.Errorf(protocol.StatusUnknownCommand, r.Command().String()))
		})
	} else {
		mux.HandleInline(protocol.CmdSyncLogAhead, forward(protocol.CmdSyncLogAhead))
	}
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	return srv.Addr().String(), n
}

// A slave of a master that does not know pipelined fetches falls back to
// one fetch in flight (it does not ask again for each fetch) and copies
// the master exactly; so does one whose connection breaks mid-stream again
// and again, and one told to cut back while fetches are in flight (it
// drops their answers and resumes at the right offset).
func TestSyncStream_OldMasterBrokenConnectionsAndCuts(t *testing.T) {
	for _, tc := range []string{"old master", "broken connections", "cut"} {
		t.Run(tc, func(t *testing.T) {
			mdir, sdir := t.TempDir(), t.TempDir()
			m := startBroker(t, mdir, replOptions, func(o *realtime.Options) {
				o.WaitSlave = true
				o.SlaveLagReadonly = time.Minute
			})
			var told *atomic.Int64
			var proxy *cutProxy
			addr := ""
			switch tc {
			case "old master", "cut":
				addr, told = syncProxy(t, m.addr(), tc == "old master")
			default:
				proxy = startCutProxy(t, m.addr())
				addr = proxy.addr()
			}
			s := startSlave(t, sdir, addr)
			p := newProducer(t, m.addr())
			body := make([]byte, 3000)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 4 {
					sendN(t, p, "orders", 300, func(i int, msg *producer.Message) { msg.Body = body })
					if proxy != nil {
						proxy.Heal() // closes every connection: the slave dials again
					}
				}
			}()
			<-done
			waitCaughtUp(t, m, 30*time.Second)
			if told != nil && (told.Load() == 0 || told.Load() > 4) {
				t.Fatalf("%s: the proxy answered %d pipelined fetches itself", tc, told.Load())
			}
			if n := counterValue(t, s.Registry(), "qmq_realtime_replication_errors_total"); tc != "broken connections" && n != 0 {
				t.Fatalf("%s: %v failed sync requests (a fall back or a cut is no failure)", tc, n)
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if want, got := storeState(t, mdir, false), storeState(t, sdir, true); !reflect.DeepEqual(got, want) {
				t.Fatalf("slave differs from master:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
