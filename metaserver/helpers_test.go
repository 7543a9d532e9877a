package metaserver

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/testutil"
)

const testToken = "test-token"

// startEtcd starts an embedded etcd for one test.
func startEtcd(t testing.TB) []string {
	t.Helper()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Endpoints()
}

// startServer starts a meta server on free loopback ports.
func startServer(t testing.TB, endpoints []string, mod func(*Options)) *Server {
	t.Helper()
	o := NewOptions()
	o.Addr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.EtcdEndpoints = endpoints
	o.AdminToken = testToken
	o.BrokerTTL = time.Minute // tests of expiry set their own
	o.EtcdTimeout = 2 * time.Second
	o.BrokerTimeout = 2 * time.Second
	if mod != nil {
		mod(&o)
	}
	lg := zap.NewNop()
	if os.Getenv("QMQ_TEST_LOG") != "" {
		lg = zaptest.NewLogger(t)
	}
	s, err := New(o, lg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// client is a TCP client of meta servers.
type client struct {
	t  testing.TB
	tr *transport.Client
}

func newClient(t testing.TB) *client {
	tr, err := transport.New(transport.Options{RequestTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return &client{t: t, tr: tr}
}

func (c *client) register(s *Server, r protocol.RegisterRequest) (protocol.RegisterResponse, error) {
	body, err := c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdRegister, protocol.AppendRegisterRequest(nil, &r))
	if err != nil {
		return protocol.RegisterResponse{}, err
	}
	return protocol.DecodeRegisterResponse(body)
}

func (c *client) mustRegister(s *Server, r protocol.RegisterRequest) protocol.RegisterResponse {
	c.t.Helper()
	resp, err := c.register(s, r)
	if err != nil {
		c.t.Fatalf("register %s/%v: %v", r.Group, r.Role, err)
	}
	return resp
}

// eligible records a group's eligible slave as its master (CmdEligible).
func (c *client) eligible(s *Server, q protocol.EligibleRequest) (protocol.EligibleResponse, error) {
	body, err := c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdEligible, protocol.AppendEligibleRequest(nil, &q))
	if err != nil {
		return protocol.EligibleResponse{}, err
	}
	return protocol.DecodeEligibleResponse(body)
}

func (c *client) mustEligible(s *Server, q protocol.EligibleRequest) protocol.EligibleResponse {
	c.t.Helper()
	resp, err := c.eligible(s, q)
	if err != nil {
		c.t.Fatalf("eligible set of %s: %v", q.Group, err)
	}
	return resp
}

func (c *client) lookup(s *Server, r protocol.LookupRequest) (protocol.LookupResponse, error) {
	body, err := c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdLookup, protocol.AppendLookupRequest(nil, &r))
	if err != nil {
		return protocol.LookupResponse{}, err
	}
	return protocol.DecodeLookupResponse(body)
}

func (c *client) mustLookup(s *Server, r protocol.LookupRequest) protocol.LookupResponse {
	c.t.Helper()
	resp, err := c.lookup(s, r)
	if err != nil {
		c.t.Fatalf("lookup %s: %v", r.Subject, err)
	}
	return resp
}

func (c *client) heartbeat(s *Server, r protocol.ClientHeartbeatRequest) (protocol.ClientHeartbeatResponse, error) {
	body, err := c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdClientHeartbeat, protocol.AppendClientHeartbeatRequest(nil, &r))
	if err != nil {
		return protocol.ClientHeartbeatResponse{}, err
	}
	return protocol.DecodeClientHeartbeatResponse(body)
}

func master(group, addr string) protocol.RegisterRequest {
	return protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, State: protocol.GroupReadWrite,
		Group: group, BrokerID: group + "-m", Address: addr}
}

func admin(s *Server, token string) *api.Client {
	return api.NewClient(s.HTTPAddr().String(), token, 5*time.Second)
}

// eventually polls cond every 10 ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

// fakeBroker answers the admin commands a realtime master serves, from
// in-memory state, and records what it was asked.
type fakeBroker struct {
	group string
	srv   *netserver.Server

	sent     atomic.Int64 // messages stored through CmdSend
	readonly atomic.Bool  // answer sends with StatusReadonly

	mu sync.Mutex
	// onSwitchover serves CmdSwitchover; nil answers StatusUnknownCommand,
	// as a broker without switchover would.
	onSwitchover func(protocol.SwitchoverRequest) error
	switchovers  []protocol.SwitchoverRequest
	manage       []protocol.ConsumerManageRequest
	stats        protocol.BrokerStatsResponse
	dead         []protocol.DeadLetter
	redriven     []protocol.DeadLetter
}

func startFakeBroker(t testing.TB, group string) *fakeBroker {
	t.Helper()
	b := &fakeBroker{group: group}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdConsumerManage, b.serveManage)
	mux.HandleFunc(protocol.CmdBrokerStats, b.serveStats)
	mux.HandleFunc(protocol.CmdDeadLetters, b.serveDead)
	mux.HandleFunc(protocol.CmdSend, b.serveSend)
	mux.HandleFunc(protocol.CmdSwitchover, b.serveSwitchover)
	srv, err := netserver.New(netserver.Options{}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	b.srv = srv
	return b
}

func (b *fakeBroker) addr() string { return b.srv.Addr().String() }

func (b *fakeBroker) serveSend(r *netserver.Request) {
	req, err := protocol.DecodeSendRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	st := protocol.StatusOK
	if b.readonly.Load() {
		st = protocol.StatusReadonly
	} else {
		b.sent.Add(int64(len(req.Messages)))
	}
	statuses := make([]protocol.Status, len(req.Messages))
	for i := range statuses {
		statuses[i] = st
	}
	r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
}

func (b *fakeBroker) serveSwitchover(r *netserver.Request) {
	req, err := protocol.DecodeSwitchoverRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	b.mu.Lock()
	b.switchovers = append(b.switchovers, req)
	fn := b.onSwitchover
	b.mu.Unlock()
	if fn == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusUnknownCommand, protocol.CmdSwitchover.String()))
		return
	}
	r.ReplyError(fn(req))
}

func (b *fakeBroker) setSwitchover(fn func(protocol.SwitchoverRequest) error) {
	b.mu.Lock()
	b.onSwitchover = fn
	b.mu.Unlock()
}

func (b *fakeBroker) switchoverRequests() []protocol.SwitchoverRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]protocol.SwitchoverRequest(nil), b.switchovers...)
}

func (b *fakeBroker) serveManage(r *netserver.Request) {
	req, err := protocol.DecodeConsumerManageRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	b.mu.Lock()
	b.manage = append(b.manage, req)
	b.mu.Unlock()
	r.Reply(protocol.StatusOK)
}

func (b *fakeBroker) serveStats(r *netserver.Request) {
	req, err := protocol.DecodeBrokerStatsRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	b.mu.Lock()
	st := b.stats
	b.mu.Unlock()
	if req.Subject != "" {
		var keep []protocol.SubjectStats
		for _, s := range st.Subjects {
			if s.Subject == req.Subject {
				keep = append(keep, s)
			}
		}
		st.Subjects = keep
	}
	r.Reply(protocol.StatusOK, protocol.AppendBrokerStatsResponse(nil, &st))
}

func (b *fakeBroker) serveDead(r *netserver.Request) {
	req, err := protocol.DecodeDeadLettersRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if req.Group != fakeDeadGroup {
		r.Reply(protocol.StatusOK, protocol.AppendDeadLettersResponse(nil, &protocol.DeadLettersResponse{}))
		return
	}
	match := func(l protocol.DeadLetter) bool {
		if len(req.IDs) == 0 {
			return true
		}
		m, err := protocol.DecodeMessage(l.Message)
		if err != nil {
			return false
		}
		for _, id := range req.IDs {
			if m.ID == id {
				return true
			}
		}
		return false
	}
	var resp protocol.DeadLettersResponse
	switch req.Action {
	case protocol.DeadLettersList:
		for _, l := range b.dead {
			if l.Seq > req.After && (req.Max == 0 || len(resp.Letters) < int(req.Max)) {
				resp.Letters = append(resp.Letters, l)
			}
		}
	case protocol.DeadLettersInspect:
		for _, l := range b.dead {
			if len(req.IDs) > 0 && match(l) {
				resp.Letters = append(resp.Letters, l)
			}
		}
	case protocol.DeadLettersRedrive, protocol.DeadLettersPurge:
		var keep []protocol.DeadLetter
		for _, l := range b.dead {
			if match(l) {
				resp.Affected++
				if req.Action == protocol.DeadLettersRedrive {
					b.redriven = append(b.redriven, l)
				}
				continue
			}
			keep = append(keep, l)
		}
		b.dead = keep
	}
	resp.Total = uint64(len(b.dead))
	r.Reply(protocol.StatusOK, protocol.AppendDeadLettersResponse(nil, &resp))
}

// fakeDeadGroup is the consumer group every fake dead letter belongs to: the
// fake answers other groups with none, as a broker does.
const fakeDeadGroup = "billing"

func (b *fakeBroker) addDeadLetter(t testing.TB, seq uint64, subject, id, body string) {
	t.Helper()
	m := &protocol.Message{Subject: subject, ID: id, Body: []byte(body), Created: time.UnixMilli(1_700_000_000_000), Attempts: 16}
	enc, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.dead = append(b.dead, protocol.DeadLetter{Seq: seq, Message: enc})
	b.mu.Unlock()
}

func (b *fakeBroker) manageRequests() []protocol.ConsumerManageRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]protocol.ConsumerManageRequest(nil), b.manage...)
}

// ordersOnTwoGroups registers two fake brokers as the masters of groups g1
// and g2 and routes subject "orders" to both (a producer's lookup).
func ordersOnTwoGroups(t *testing.T, s *Server, c *client) (b1, b2 *fakeBroker) {
	t.Helper()
	b1, b2 = startFakeBroker(t, "g1"), startFakeBroker(t, "g2")
	c.mustRegister(s, master("g1", b1.addr()))
	c.mustRegister(s, master("g2", b2.addr()))
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })
	c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	return b1, b2
}
