package realtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap/zaptest"
)

// Small segments so a few thousand messages roll several of them.
const (
	replSegment = 2 << 20
	replMaxBody = 16 << 10
)

func replOptions(o *realtime.Options) {
	o.SegmentSize = replSegment
	o.MaxBody = replMaxBody
	o.ConsumerTimeout = time.Minute // no returns while states are compared
}

func startSlave(t *testing.T, dir, master string, mutate ...func(*realtime.Options)) *testBroker {
	t.Helper()
	return startBroker(t, dir, append([]func(*realtime.Options){replOptions, func(o *realtime.Options) {
		o.Role = realtime.RoleSlave
		o.Master = master
	}}, mutate...)...)
}

// waitCaughtUp waits until the master sees its slave holding both of its
// logs up to its committed ends.
//
// The master's action log commits every ActionFlushInterval (50 ms), so
// actions just taken (a consumer's last acks) may not be committed yet: the
// master's ends must also hold still for longer than that.
func waitCaughtUp(t *testing.T, m *testBroker, timeout time.Duration) {
	t.Helper()
	var lastMsg, lastAct int64 = -1, -1
	var still time.Time
	testutil.CheckFor(t, timeout, 10*time.Millisecond, func() error {
		st := m.Replication()
		if st.MessageEnd != lastMsg || st.ActionEnd != lastAct {
			lastMsg, lastAct, still = st.MessageEnd, st.ActionEnd, time.Now()
		}
		if st.SlaveOffset != st.MessageEnd || st.SlaveActionOffset != st.ActionEnd {
			return fmt.Errorf("slave at message %d / action %d, master at %d / %d", st.SlaveOffset, st.SlaveActionOffset, st.MessageEnd, st.ActionEnd)
		}
		if time.Since(still) < 200*time.Millisecond {
			return errors.New("the master may still commit actions")
		}
		return nil
	})
}

// copyState is what a slave must hold exactly as its master does.
type copyState struct {
	Start, End int64
	Subjects   []store.SubjectStats
	Groups     []store.GroupStats
}

// storeState opens a closed broker's store and returns its state.
func storeState(t *testing.T, dir string, replica bool) copyState {
	t.Helper()
	o := store.DefaultOptions
	o.SegmentSize = replSegment
	o.Limits.MaxBody = replMaxBody
	o.CheckpointInterval, o.RetentionInterval, o.RetentionAge = -1, -1, -1
	o.Replica = replica
	s, err := store.Open(dir, o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Stats()
	for i := range st.Groups {
		// A consumer that never got an entry has no state in the action
		// log (nothing to lose); only the master's memory knows it.
		var cs []store.ConsumerStats
		for _, c := range st.Groups[i].Consumers {
			if c.PullSeq > 0 || c.AckSeq >= 0 {
				c.LastSeen = time.Time{}
				cs = append(cs, c)
			}
		}
		st.Groups[i].Consumers, st.Groups[i].AtRisk = cs, 0
	}
	for i := range st.Subjects {
		st.Subjects[i].RetentionDropSeq = 0
	}
	return copyState{Start: st.MessageLogStart, End: st.MessageLogEnd, Subjects: st.Subjects, Groups: st.Groups}
}

// A slave started from empty catches up with a master that rolled several
// segments, then follows its sends, pulls and acks; stopped, its store holds
// the master's subjects, group cursors and consumer positions.
func TestReplication_SlaveCopiesMaster(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := startBroker(t, mdir, replOptions)
	p := newProducer(t, m.addr())
	body := make([]byte, 10000)
	ids := sendN(t, p, "orders", 600, func(i int, msg *producer.Message) { msg.Body = body })
	col := newCollector()
	c := newConsumer(t, "c1", m.addr())
	if _, err := c.Subscribe("orders", "billing", col.handler, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	col.waitAll(t, ids, 30*time.Second)

	s := startSlave(t, sdir, m.addr())
	waitCaughtUp(t, m, 30*time.Second)
	if st := s.Replication(); st.Role != realtime.RoleSlave || st.MessageEnd != m.Replication().MessageEnd {
		t.Fatalf("slave status %+v", st)
	}
	// Live traffic: more sends on two subjects and consumption.
	more := sendN(t, p, "orders", 400, func(i int, msg *producer.Message) { msg.Body = body })
	sendN(t, p, "audit", 300, nil)
	col.waitAll(t, more, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, m, 30*time.Second)
	// Both sides show the lag (none now) in their status and metrics.
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if ms, ss := m.Replication(), s.Replication(); ms.LagBytes != 0 || ss.LagBytes != 0 || ss.LagSeconds > 2 {
			return fmt.Errorf("lag: master sees %d bytes, slave %d bytes %.1fs", ms.LagBytes, ss.LagBytes, ss.LagSeconds)
		}
		return nil
	})
	for b, names := range map[*testBroker][]string{
		m: {"qmq_realtime_slave_offset_bytes", "qmq_realtime_slave_lag_bytes", "qmq_realtime_slave_lag_seconds", "qmq_realtime_waiting_acks"},
		s: {"qmq_realtime_replication_lag_bytes", "qmq_realtime_replication_lag_seconds"},
	} {
		mfs, err := b.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]float64{}
		for _, mf := range mfs {
			if len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetGauge() != nil {
				have[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		for _, n := range names {
			if _, ok := have[n]; !ok {
				t.Errorf("%s: no gauge %s", b.opts.Role, n)
			}
		}
		if b == m && have["qmq_realtime_slave_offset_bytes"] != float64(m.Replication().MessageEnd) {
			t.Errorf("slave offset gauge %v, master end %d", have["qmq_realtime_slave_offset_bytes"], m.Replication().MessageEnd)
		}
	}
	if segs := m.Replication().MessageEnd / replSegment; segs < 4 {
		t.Fatalf("test needs several segments, master log ends at %d", m.Replication().MessageEnd)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, got := storeState(t, mdir, false), storeState(t, sdir, true)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("slave differs from master:\n got %+v\nwant %+v", got, want)
	}
	acked := false
	for _, g := range want.Groups {
		for _, c := range g.Consumers {
			acked = acked || (g.Subject == "orders" && c.AckSeq == 999)
		}
	}
	if !acked {
		t.Fatalf("test needs acked consumer state, master has %+v", want.Groups)
	}
}

func rawSend(ctx context.Context, c *transport.Client, addr, subject, id string) error {
	msg, err := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: id, Body: []byte("wait for the slave"), Created: time.Now()}, protocol.DefaultLimits)
	if err != nil {
		return err
	}
	body, err := c.Call(ctx, addr, protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{msg}))
	if err != nil {
		return err
	}
	st, err := protocol.DecodeSendResponse(body)
	if err != nil {
		return err
	}
	if st[0] != protocol.StatusOK {
		return protocol.Errorf(st[0], "message "+id)
	}
	return nil
}

func newClient(t *testing.T) *transport.Client {
	t.Helper()
	c, err := transport.New(transport.Options{RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// With --wait-slave a send is answered only once the slave has it; with
// the slave stopped sends wait, and complete when it comes back; past the
// lag threshold they are answered readonly and the group stays readonly
// until the slave catches up.
func TestReplication_WaitSlave(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the lag threshold")
	}
	sdir := t.TempDir()
	m := startBroker(t, t.TempDir(), replOptions, func(o *realtime.Options) {
		o.WaitSlave = true
		o.SlaveLagReadonly = 2 * time.Second
	})
	s := startSlave(t, sdir, m.addr())
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		if err := rawSend(ctx, c, m.addr(), "w", fmt.Sprint("a", i)); err != nil {
			t.Fatal(err)
		}
		// Answered: the slave's acknowledged (durable) copy already covers
		// the master's end; the slave indexes it when it hears that end
		// (the master's next answer, at once).
		ms := m.Replication()
		if ms.SlaveOffset < ms.MessageEnd {
			t.Fatalf("send %d answered before the slave had it: master end %d, slave acknowledged %d", i, ms.MessageEnd, ms.SlaveOffset)
		}
		testutil.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
			if ss := s.Replication(); ss.MessageEnd != ms.MessageEnd {
				return fmt.Errorf("slave indexed up to %d, master's end %d", ss.MessageEnd, ms.MessageEnd)
			}
			return nil
		})
	}

	// The slave stops: a send waits; the slave restarts: the send completes.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rawSend(ctx, c, m.addr(), "w", "b0") }()
	select {
	case err := <-done:
		t.Fatalf("send answered without a slave: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if n := m.Replication().WaitingAcks; n != 1 {
		t.Fatalf("%d replies wait for the slave, want 1", n)
	}
	// A resent copy is busy while the first waits (a duplicate answer
	// would acknowledge what the slave lacks), a duplicate once answered.
	if err := rawSend(ctx, c, m.addr(), "w", "b0"); !errors.Is(err, protocol.ErrBusy) {
		t.Fatalf("resend while the first copy waits for the slave: %v, want busy", err)
	}
	s = startSlave(t, sdir, m.addr())
	if err := <-done; err != nil {
		t.Fatalf("send after the slave came back: %v", err)
	}
	if err := rawSend(ctx, c, m.addr(), "w", "b0"); !errors.Is(err, protocol.ErrDuplicate) {
		t.Fatalf("resend once the slave has the first copy: %v, want duplicate", err)
	}
	// The wait shows in qmq_realtime_slave_wait_seconds: 21 replies, one
	// of them held for more than the half second above.
	h := findSeries(t, m.Registry(), "qmq_realtime_slave_wait_seconds", nil).GetHistogram()
	if n, sum := h.GetSampleCount(), h.GetSampleSum(); n < 21 || sum < 0.5 {
		t.Fatalf("slave wait histogram: %d replies, %.3fs in all; want at least 21 and 0.5s", n, sum)
	}

	// The slave stops for longer than the threshold: the waiting send is
	// answered readonly, so are new ones, until the slave is back.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := rawSend(ctx, c, m.addr(), "w", "c0")
	if !errors.Is(err, protocol.ErrReadonly) {
		t.Fatalf("send with the slave gone: %v", err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("readonly after %v, before the 2s threshold", waited)
	}
	if err := rawSend(ctx, c, m.addr(), "w", "c1"); !errors.Is(err, protocol.ErrReadonly) {
		t.Fatalf("send while readonly: %v", err)
	}
	if !m.Replication().LagReadonly {
		t.Fatal("master does not report the lag readonly state")
	}
	s = startSlave(t, sdir, m.addr())
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		return rawSend(ctx, c, m.addr(), "w", fmt.Sprint("d", time.Now().UnixNano()))
	})
	waitCaughtUp(t, m, 10*time.Second)
}

// The replies waiting for the slave are bounded: past MaxWaitingAcks new
// sends are refused busy at once.
func TestReplication_WaitingAcksBounded(t *testing.T) {
	m := startBroker(t, t.TempDir(), replOptions, func(o *realtime.Options) {
		o.WaitSlave = true
		o.SlaveLagReadonly = time.Minute
		o.MaxWaitingAcks = 4
	})
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		go rawSend(ctx, c, m.addr(), "w", fmt.Sprint("a", i))
		testutil.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			if n := m.Replication().WaitingAcks; n != i+1 {
				return fmt.Errorf("%d waiting replies, want %d", n, i+1)
			}
			return nil
		})
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer tcancel()
	if err := rawSend(tctx, c, m.addr(), "w", "over"); !errors.Is(err, protocol.ErrBusy) {
		t.Fatalf("send past the bound: %v", err)
	}
}

// A slave refuses producers and consumers; a master refuses bad sync
// requests with clear errors.
func TestReplication_Refusals(t *testing.T) {
	m := startBroker(t, t.TempDir(), replOptions)
	s := startSlave(t, t.TempDir(), m.addr())
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rawSend(ctx, c, s.addr(), "x", "1"); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("send to a slave: %v", err)
	}
	pull := protocol.AppendPullRequest(nil, &protocol.PullRequest{Subject: "x", Group: "g", ConsumerID: "c", Max: 1, Timeout: 10 * time.Millisecond})
	if _, err := c.Call(ctx, s.addr(), protocol.CmdPull, pull); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("pull from a slave: %v", err)
	}
	ack := protocol.AppendAckRequest(nil, &protocol.AckRequest{Subject: "x", Group: "g", ConsumerID: "c", First: 0, Last: 0})
	if _, err := c.Call(ctx, s.addr(), protocol.CmdAck, ack); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("ack to a slave: %v", err)
	}
	if err := rawSend(ctx, c, m.addr(), "x", "1"); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, m, 10*time.Second) // the slave's first fetch shows its copy holds no tail to cut
	end := m.Replication().MessageEnd
	good := protocol.SyncRequest{Group: "rt1", MessageSegmentSize: replSegment, ActionSegmentSize: store.DefaultOptions.ActionSegmentSize, MaxBytes: 1 << 20}
	cases := []struct {
		name string
		body []byte
		addr string
		want error
	}{
		{"garbage", []byte("not a sync request"), m.addr(), protocol.ErrBadRequest},
		{"past the end", func() []byte { q := good; q.MessageOffset = end + 100; return protocol.AppendSyncRequest(nil, &q) }(), m.addr(), protocol.ErrBadRequest},
		{"inside a record", func() []byte { q := good; q.MessageOffset = 5; return protocol.AppendSyncRequest(nil, &q) }(), m.addr(), protocol.ErrBadRequest},
		{"segment size", func() []byte { q := good; q.MessageSegmentSize = 1 << 30; return protocol.AppendSyncRequest(nil, &q) }(), m.addr(), protocol.ErrInvalid},
		{"other group", func() []byte { q := good; q.Group = "rt2"; return protocol.AppendSyncRequest(nil, &q) }(), m.addr(), protocol.ErrInvalid},
		{"to a slave", protocol.AppendSyncRequest(nil, &good), s.addr(), protocol.ErrNotMaster},
	}
	for _, tc := range cases {
		if _, err := c.Call(ctx, tc.addr, protocol.CmdSyncLog, tc.body); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A good request gets whole records from offset 0.
	resp, err := c.Call(ctx, m.addr(), protocol.CmdSyncLog, protocol.AppendSyncRequest(nil, &good))
	if err != nil {
		t.Fatal(err)
	}
	p, err := protocol.DecodeSyncResponse(resp)
	if err != nil || p.Message.Offset != 0 || int64(len(p.Message.Data)) != p.Message.End || p.Message.End < end {
		t.Fatalf("sync response %+v, %v", p.Message, err)
	}
	// Without --wait-slave the master keeps serving when its slave is gone.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := rawSend(ctx, c, m.addr(), "x", fmt.Sprint("after", i)); err != nil {
			t.Fatalf("send with the slave gone: %v", err)
		}
	}
}

// A slave process killed with SIGKILL while copying under --wait-slave:
// sends wait (none fails), the restarted slave resumes from its own durable
// offset (the master sends only what it lacks), the waiting sends complete,
// and the slave ends with the master's state.
func TestReplication_SlaveKilledResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a broker process")
	}
	bin := filepath.Join(t.TempDir(), "qmq-realtime")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/qmq-go/qmq/realtime/cmd/qmq-realtime").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	mdir, sdir := t.TempDir(), t.TempDir()
	m := startBroker(t, mdir, replOptions, func(o *realtime.Options) {
		o.WaitSlave = true
		o.SlaveLagReadonly = time.Minute
	})
	runSlave := func() *exec.Cmd {
		cmd := exec.Command(bin, "--role=slave", "--master="+m.addr(), "--data-dir="+sdir, "--addr=127.0.0.1:0", "--http-addr=",
			fmt.Sprint("--segment-size=", replSegment), fmt.Sprint("--max-body=", replMaxBody), "--log-level=warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	p := newProducer(t, m.addr())
	body := make([]byte, 4000)
	child := runSlave()
	sendN(t, p, "big", 500, func(i int, msg *producer.Message) { msg.Body = body })
	waitCaughtUp(t, m, 30*time.Second)
	// Kill it while it copies more.
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		sendN(t, p, "big", 300, func(i int, msg *producer.Message) { msg.Body = body })
	}()
	testutil.CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		if st := m.Replication(); st.SlaveOffset <= 500*4000 || st.SlaveOffset == st.MessageEnd {
			return fmt.Errorf("slave at %d of %d", st.SlaveOffset, st.MessageEnd)
		}
		return nil
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	// Sends wait for the slave now.
	testutil.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := m.Replication().WaitingAcks; n == 0 {
			return errors.New("no send waits for the dead slave")
		}
		return nil
	})
	select {
	case <-sendDone:
		t.Fatal("sends completed without a slave")
	default:
	}
	before := m.Replication()
	child = runSlave()
	<-sendDone // sendN fails the test if any send failed
	waitCaughtUp(t, m, 30*time.Second)
	// The restarted slave asked from its own durable offset: at least what
	// the master last heard from it before the kill.
	if after := m.Replication(); after.SlaveResumedFrom < before.SlaveOffset || before.SlaveOffset <= 0 {
		t.Fatalf("restarted slave resumed from %d; it had acknowledged %d before the kill", after.SlaveResumedFrom, before.SlaveOffset)
	}
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("slave exit: %v", err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want, got := storeState(t, mdir, false), storeState(t, sdir, true); !reflect.DeepEqual(got, want) {
		t.Fatalf("slave differs from master:\n got %+v\nwant %+v", got, want)
	}
}

// metaStub is a meta server that records the last registration of each
// role.
type metaStub struct {
	mu     sync.Mutex
	last   map[protocol.BrokerRole]protocol.RegisterRequest
	master string // the group's master address it names
	addr   string
}

func startMetaStub(t *testing.T) *metaStub {
	t.Helper()
	st := &metaStub{last: map[protocol.BrokerRole]protocol.RegisterRequest{}}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdRegister, func(r *netserver.Request) {
		q, err := protocol.DecodeRegisterRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		st.mu.Lock()
		st.last[q.Role] = q
		master := st.master
		st.mu.Unlock()
		r.Reply(protocol.StatusOK, protocol.AppendRegisterResponse(nil, &protocol.RegisterResponse{LeaseID: 1, TTL: 10 * time.Second, Version: 1, Master: master}))
	})
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, mux, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	st.addr = srv.Addr().String()
	return st
}

func (st *metaStub) state(role protocol.BrokerRole) (protocol.GroupState, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	q, ok := st.last[role]
	return q.State, ok
}

// A slave registers as the group's slave and its master as the master,
// read-write. (What a --wait-slave master does when its slave goes is
// failover's: TestReplication_SlaveDownReadonly, TestTiming_FailoverKillSlave.)
func TestReplication_RegistersRoles(t *testing.T) {
	meta := startMetaStub(t)
	withMeta := func(o *realtime.Options) {
		o.MetaServers = []string{meta.addr}
		o.HeartbeatInterval = 50 * time.Millisecond
	}
	m := startBroker(t, t.TempDir(), replOptions, withMeta, func(o *realtime.Options) { o.WaitSlave = true })
	startSlave(t, t.TempDir(), m.addr(), withMeta)
	expect := func(role protocol.BrokerRole, want protocol.GroupState) {
		t.Helper()
		testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if got, ok := meta.state(role); !ok || got != want {
				return fmt.Errorf("%v registered %v (seen %v), want %v", role, got, ok, want)
			}
			return nil
		})
	}
	expect(protocol.RoleSlave, protocol.GroupReadonly)
	expect(protocol.RoleMaster, protocol.GroupReadWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rawSend(ctx, newClient(t), m.addr(), "r", "1"); err != nil {
		t.Fatal(err)
	}
}

// A --wait-slave master with --slave-down readonly whose eligible slave
// stops refuses sends (readonly) until the slave is back and eligible
// again; a slave that left before it became eligible would leave it alone
// instead (the policy is about a slave that could be elected).
func TestReplication_SlaveDownReadonly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a meta server over etcd and waits for eligibility twice")
	}
	meta, _ := startFailoverMeta(t, 2*time.Second)
	withMeta := func(o *realtime.Options) {
		o.Group = failoverGroup
		o.MetaServers = []string{meta.Addr().String()}
		o.HeartbeatInterval = 50 * time.Millisecond
	}
	m := startBroker(t, t.TempDir(), replOptions, withMeta, func(o *realtime.Options) {
		o.WaitSlave = true
		o.SlaveDown = failover.SlaveDownReadonly
	})
	state := func(what string, ok func(realtime.ReplicationStatus) bool) {
		t.Helper()
		testutil.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
			if st := m.Replication(); !ok(st) {
				return fmt.Errorf("%s: %+v", what, st)
			}
			return nil
		})
	}
	eligible := func(st realtime.ReplicationStatus) bool {
		return st.EligibleSlave != "" && st.WriteState == protocol.WriteWritable
	}
	state("the master", func(st realtime.ReplicationStatus) bool { return st.Role == realtime.RoleMaster && st.Epoch > 0 })
	sdir := t.TempDir()
	s := startBroker(t, sdir, replOptions, withMeta, func(o *realtime.Options) { o.Role = realtime.RoleSlave })
	state("the slave eligible", eligible)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rawSend(ctx, c, m.addr(), "r", "1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	state("readonly with the slave gone", func(st realtime.ReplicationStatus) bool { return st.WriteState == protocol.WriteReadonly })
	if err := rawSend(ctx, c, m.addr(), "r", "2"); !errors.Is(err, protocol.ErrReadonly) {
		t.Fatalf("send with the slave gone: %v", err)
	}
	startBroker(t, sdir, replOptions, withMeta, func(o *realtime.Options) { o.Role = realtime.RoleSlave })
	state("the slave eligible again", eligible)
	if err := rawSend(ctx, c, m.addr(), "r", "3"); err != nil {
		t.Fatalf("send with the slave back: %v", err)
	}
}

// A slave without --master follows the master the meta server names.
func TestReplication_SlaveFollowsMetaMaster(t *testing.T) {
	meta := startMetaStub(t)
	m := startBroker(t, t.TempDir(), replOptions)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 10 {
		if err := rawSend(ctx, c, m.addr(), "f", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	s := startSlave(t, t.TempDir(), "", func(o *realtime.Options) {
		o.MetaServers = []string{meta.addr}
		o.HeartbeatInterval = 50 * time.Millisecond
	})
	if err := rawSend(ctx, c, s.addr(), "f", "x"); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("send to a slave: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // no master named yet: nothing copied
	if st := s.Replication(); st.MessageEnd != 0 || st.Master != "" {
		t.Fatalf("slave copied %d bytes from %q before a master was named", st.MessageEnd, st.Master)
	}
	meta.mu.Lock()
	meta.master = m.addr()
	meta.mu.Unlock()
	waitCaughtUp(t, m, 10*time.Second)
	// The slave acknowledges a chunk once it is durable and commits it
	// after (copyIndexLoop), so its committed end may trail the master's
	// view of its durable end for a moment.
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if st := s.Replication(); st.Master != m.addr() || st.MessageEnd != m.Replication().MessageEnd {
			return fmt.Errorf("slave status %+v", st)
		}
		return nil
	})
}

// A master that restarts does not know what tentative tail its previous
// run served (a machine crash loses what was not fdatasynced, and its next
// records land at the same offsets): a copy that reaches past its recovered
// end is told to cut back to it, and the durable end such a copy
// acknowledges counts only up to it, until the copy asks from at or below
// the cut with the generation the master told it.
func TestReplication_RestartedMasterCutsCopiesPastItsEnd(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := restartedMaster(ctx, t, c)
	recovered := m.Replication().MessageEnd
	sync := func(q protocol.SyncRequest) protocol.SyncResponse {
		t.Helper()
		q.Group, q.MessageSegmentSize, q.ActionSegmentSize = "rt1", replSegment, store.DefaultOptions.ActionSegmentSize
		resp, err := c.Call(ctx, m.addr(), protocol.CmdSyncLog, protocol.AppendSyncRequest(nil, &q))
		if err != nil {
			t.Fatal(err)
		}
		p, err := protocol.DecodeSyncResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A copy past the recovered end (the tail the last run served).
	past := recovered + 1000
	p := sync(protocol.SyncRequest{MessageOffset: past, MessageDurable: past, MaxBytes: 1 << 20})
	if p.Cut != recovered || p.Generation != 1 || len(p.Message.Data) != 0 {
		t.Fatalf("fetch past the recovered end %d: cut %d, generation %d, %d bytes", recovered, p.Cut, p.Generation, len(p.Message.Data))
	}
	if got := m.Replication().SlaveOffset; got > recovered {
		t.Fatalf("the master counts the copy durable up to %d, past the cut %d", got, recovered)
	}
	// New records land where the lost tail was; the copy is still cut.
	for i := range 20 {
		if err := rawSend(ctx, c, m.addr(), "x", fmt.Sprint("b", i)); err != nil {
			t.Fatal(err)
		}
	}
	end := m.Replication().MessageEnd
	if end <= past {
		t.Fatalf("test needs the master past %d, it ends at %d", past, end)
	}
	if p := sync(protocol.SyncRequest{MessageOffset: past, MessageDurable: past, MaxBytes: 1 << 20, Generation: 1}); p.Cut != recovered {
		t.Fatalf("fetch past the cut after new records: cut %d", p.Cut)
	}
	// An acknowledgement of an older generation counts up to the cut only.
	sync(protocol.SyncRequest{MessageOffset: end, MessageDurable: end})
	if got := m.Replication().SlaveOffset; got > recovered {
		t.Fatalf("an acknowledgement of generation 0 counts up to %d, past the cut %d", got, recovered)
	}
	// Cut back, the copy asks from the cut and gets the new records.
	p = sync(protocol.SyncRequest{MessageOffset: recovered, MessageDurable: recovered, MaxBytes: 1 << 20, Generation: 1})
	if p.Cut != -1 || p.Message.Offset != recovered || p.Message.Offset+int64(len(p.Message.Data)) != end {
		t.Fatalf("fetch from the cut: cut %d, %d bytes at %d, master ends at %d", p.Cut, len(p.Message.Data), p.Message.Offset, end)
	}
	sync(protocol.SyncRequest{MessageOffset: end, MessageDurable: end, Generation: 1})
	if got := m.Replication().SlaveOffset; got != end {
		t.Fatalf("the acknowledgement of the current generation: slave offset %d, want %d", got, end)
	}
}

// restartedMaster starts a master, stores 20 messages on subject "x" (ids
// a0…a19) and restarts it on the same directory: a master that does not
// know what tentative tail its previous run served.
func restartedMaster(ctx context.Context, t *testing.T, c *transport.Client) *testBroker {
	t.Helper()
	dir := t.TempDir()
	m := startBroker(t, dir, replOptions)
	for i := range 20 {
		if err := rawSend(ctx, c, m.addr(), "x", fmt.Sprint("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return startBroker(t, dir, replOptions)
}
