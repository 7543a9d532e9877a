package producer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// fakeBroker answers send requests the way a realtime broker does: it
// checks every message's CRC, remembers ids (answering duplicates with
// StatusDuplicate) and replies with one status per message. Its mode makes
// it misbehave.
type fakeBroker struct {
	t   testing.TB
	srv *netserver.Server

	mu     sync.Mutex
	stored map[string]*protocol.Message
	order  []string
	status protocol.Status // answer every message with this (0: store)
	delay  time.Duration   // wait this long before answering
	hold   chan struct{}   // when set, wait for it to close before answering
	// refuse, when set, answers a message with its status instead of
	// storing it (0: store).
	refuse func(m *protocol.Message) protocol.Status
	reqs   int
}

func startFakeBroker(t testing.TB) *fakeBroker {
	t.Helper()
	b := &fakeBroker{t: t, stored: map[string]*protocol.Message{}}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, b.serveSend)
	srv, err := netserver.New(netserver.Options{}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	t.Cleanup(func() { b.stop() })
	return b
}

func (b *fakeBroker) addr() string { return b.srv.Addr().String() }

func (b *fakeBroker) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b.srv.Close(ctx)
}

func (b *fakeBroker) set(status protocol.Status, delay time.Duration) {
	b.mu.Lock()
	b.status, b.delay = status, delay
	b.mu.Unlock()
}

func (b *fakeBroker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.stored)
}

func (b *fakeBroker) has(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stored[id] != nil
}

func (b *fakeBroker) serveSend(r *netserver.Request) {
	req, err := protocol.DecodeSendRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	b.mu.Lock()
	b.reqs++
	status, delay, hold := b.status, b.delay, b.hold
	statuses := make([]protocol.Status, len(req.Messages))
	for i, raw := range req.Messages {
		if status != protocol.StatusOK {
			statuses[i] = status
			continue
		}
		m, err := protocol.DecodeMessage(raw)
		if err != nil {
			statuses[i] = protocol.StatusInvalid
			continue
		}
		if b.refuse != nil {
			if st := b.refuse(m); st != protocol.StatusOK {
				statuses[i] = st
				continue
			}
		}
		if b.stored[m.ID] != nil {
			statuses[i] = protocol.StatusDuplicate
			continue
		}
		b.stored[m.ID] = m
		b.order = append(b.order, m.ID)
	}
	b.mu.Unlock()
	reply := func() { r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses)) }
	switch {
	case hold != nil:
		go func() { <-hold; reply() }()
	case delay > 0:
		time.AfterFunc(delay, reply)
	default:
		reply()
	}
}
