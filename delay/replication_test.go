package delay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"go.uber.org/zap/zaptest"
)

func startDelayWith(t *testing.T, o delay.Options) *delay.Server {
	t.Helper()
	s, err := delay.New(o, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func slaveOptions(t *testing.T, dir, master, realtimeAddr string) delay.Options {
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Realtime = "127.0.0.1:0", "", dir, []string{realtimeAddr}
	o.Role, o.Master = delay.RoleSlave, master
	o.SyncWait = 200 * time.Millisecond
	return o
}

func sendDelayed(t *testing.T, p *producer.Producer, prefix string, n int, due time.Time) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		m := &producer.Message{Subject: "repl", Body: fmt.Appendf(nil, "%s-%d", prefix, i), DeliverAt: due}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("send %s-%d: %v", prefix, i, err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// A slave started after the master took messages catches up from empty,
// follows what the master takes and forwards (its pending count follows the
// master's), and refuses sends with StatusNotMaster.
func TestReplication_SlaveCatchesUpAndFollows(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "repl")
	m := startDelay(t, t.TempDir(), "127.0.0.1:0", rtAddr)
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	sendDelayed(t, p, "later", 40, time.Now().Add(time.Hour))
	sendDelayed(t, p, "next-day", 10, time.Now().Add(26*time.Hour))

	sl := startDelayWith(t, slaveOptions(t, t.TempDir(), m.Addr().String(), rtAddr))
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := sl.Stats().Pending; n != 50 {
			return fmt.Errorf("slave holds %d pending, want 50", n)
		}
		return nil
	})
	soon := sendDelayed(t, p, "soon", 20, time.Now().Add(1500*time.Millisecond))
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range soon {
			if len(got[id]) == 0 {
				return fmt.Errorf("message %s not delivered", id)
			}
		}
		return nil
	})
	// The dispatch marks reach the slave: its pending count goes back.
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n, mn := sl.Stats().Pending, m.Stats().Pending; n != 50 || mn != 50 {
			return fmt.Errorf("slave holds %d pending, master %d, want 50", n, mn)
		}
		if r := m.Replication(); r.LagBytes != 0 {
			return fmt.Errorf("master sees its slave %d bytes behind", r.LagBytes)
		}
		return nil
	})
	if r := sl.Replication(); r.Role != delay.RoleSlave || r.LagBytes != 0 {
		t.Fatalf("slave replication status %+v", r)
	}

	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "repl", ID: "x", Body: []byte("x"), DeliverAt: time.Now().Add(time.Hour)}, protocol.DefaultLimits)
	_, err = c.Call(context.Background(), sl.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{msg}))
	if !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("send to the slave: %v, want StatusNotMaster", err)
	}
}

// --wait-slave: a reply comes once the slave holds the message; with the
// slave gone, the master turns readonly after SlaveLagReadonly and back
// once a slave has caught up.
func TestReplication_WaitSlave(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mo := delay.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.DataDir, mo.Realtime = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}
	mo.WaitSlave, mo.SlaveLagReadonly = true, 500*time.Millisecond
	m := startDelayWith(t, mo)
	slaveDir := t.TempDir()
	so := slaveOptions(t, slaveDir, m.Addr().String(), rtAddr)
	sl, err := delay.New(so, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i := range 20 {
		sendDelayed(t, p, fmt.Sprint("w", i), 1, time.Now().Add(time.Hour))
		if n := sl.Stats().Pending; n != int64(i+1) {
			t.Fatalf("send %d acknowledged while the slave holds %d messages", i, n)
		}
	}
	sl.Close(context.Background())

	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func() error {
		msg, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "repl", ID: fmt.Sprint(time.Now().UnixNano()), Body: []byte("x"),
			DeliverAt: time.Now().Add(time.Hour)}, protocol.DefaultLimits)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Call(ctx, m.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{msg}))
		return err
	}
	if err := send(); !errors.Is(err, protocol.ErrReadonly) {
		t.Fatalf("send without a slave: %v, want StatusReadonly after the lag threshold", err)
	}
	testutil.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if !m.Replication().Readonly {
			return errors.New("master not readonly")
		}
		return nil
	})
	if err := send(); !errors.Is(err, protocol.ErrReadonly) {
		t.Fatalf("send while readonly: %v", err)
	}
	startDelayWith(t, so) // the slave returns and catches up
	testutil.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if m.Replication().Readonly {
			return errors.New("master still readonly")
		}
		return send()
	})
}

// Sync requests with bad input get clear errors: an undecodable body
// (StatusBadRequest), another group (StatusInvalid), a newer epoch than the
// master's (StatusStaleEpoch: the master was deposed), a read at an offset
// that is no record start (StatusBadRequest); a slave refuses them all
// with StatusNotMaster.
func TestReplication_BadSyncRequests(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	m := startDelay(t, t.TempDir(), "127.0.0.1:0", rtAddr)
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	sendDelayed(t, p, "x", 3, time.Now().Add(time.Hour))
	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(addr string, cmd protocol.Command, body []byte) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return c.Call(ctx, addr, cmd, body)
	}
	manifest := func(q protocol.DelayManifestRequest) ([]byte, error) {
		return call(m.Addr().String(), protocol.CmdDelaySyncManifest, protocol.AppendDelayManifestRequest(nil, &q))
	}
	if _, err := call(m.Addr().String(), protocol.CmdDelaySyncManifest, []byte{1, 2, 3}); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("undecodable manifest request: %v", err)
	}
	if _, err := manifest(protocol.DelayManifestRequest{Group: "other", Acked: -1}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("another group: %v", err)
	}
	if _, err := manifest(protocol.DelayManifestRequest{Group: "dl1", Epoch: 9, Acked: -1}); !errors.Is(err, protocol.ErrStaleEpoch) {
		t.Fatalf("a newer epoch: %v", err)
	}
	body, err := manifest(protocol.DelayManifestRequest{Group: "dl1", Acked: -1})
	if err != nil {
		t.Fatal(err)
	}
	man, err := protocol.DecodeDelayManifestResponse(body)
	if err != nil || man.Flags&protocol.DelayManifestFull == 0 || len(man.Hours) != 1 || man.Hours[0].Records != 3 {
		t.Fatalf("full manifest: %+v, %v", man, err)
	}
	h := man.Hours[0]
	read := func(g protocol.DelayRange) ([]byte, error) {
		q := protocol.DelayReadRequest{Group: "dl1", MaxBytes: 1 << 20, Ranges: []protocol.DelayRange{g}}
		return call(m.Addr().String(), protocol.CmdDelaySyncRead, protocol.AppendDelayReadRequest(nil, &q))
	}
	if _, err := read(protocol.DelayRange{Hour: h.Hour, File: protocol.DelayScheduleFile, From: 1, To: h.ScheduleSize}); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("read inside a record: %v", err)
	}
	body, err = read(protocol.DelayRange{Hour: h.Hour, File: protocol.DelayScheduleFile, From: 0, To: h.ScheduleSize})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := protocol.DecodeDelayReadResponse(body)
	if err != nil || len(rp.Chunks) != 1 || int64(len(rp.Chunks[0].Data)) != h.ScheduleSize {
		t.Fatalf("read the whole hour: %+v, %v", rp, err)
	}

	sl := startDelayWith(t, slaveOptions(t, t.TempDir(), m.Addr().String(), rtAddr))
	if _, err := call(sl.Addr().String(), protocol.CmdDelaySyncManifest, protocol.AppendDelayManifestRequest(nil, &protocol.DelayManifestRequest{Group: "dl1", Acked: -1})); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("manifest asked of a slave: %v", err)
	}
}

// The replies waiting for the slave are bounded: past MaxWaitingAcks new
// sends get StatusBusy at once; the waiting one completes when a slave
// copies its message.
func TestReplication_WaitingAcksAreBounded(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mo := delay.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.DataDir, mo.Realtime = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}
	mo.WaitSlave, mo.SlaveLagReadonly, mo.MaxWaitingAcks = true, time.Minute, 1
	m := startDelayWith(t, mo)
	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(id string) error {
		msg, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "repl", ID: id, Body: []byte("x"), DeliverAt: time.Now().Add(time.Hour)}, protocol.DefaultLimits)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := c.Call(ctx, m.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{msg}))
		return err
	}
	first := make(chan error, 1)
	go func() { first <- send("first") }()
	testutil.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := m.Replication().WaitingAcks; n != 1 {
			return fmt.Errorf("%d replies waiting", n)
		}
		return nil
	})
	if err := send("second"); !errors.Is(err, protocol.ErrBusy) {
		t.Fatalf("send past the bound: %v, want StatusBusy", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first send was answered without a slave: %v", err)
	default:
	}
	sl := startDelayWith(t, slaveOptions(t, t.TempDir(), m.Addr().String(), rtAddr))
	if err := <-first; err != nil {
		t.Fatalf("the first send once a slave copied it: %v", err)
	}
	if n := sl.Stats().Pending; n != 1 {
		t.Fatalf("the slave holds %d messages, want the first", n)
	}
}

// A master that restarts keeps its slave's copy valid: the slave asks for
// every hour again (a new run), finds it holds them, and copies only what
// is new.
func TestReplication_MasterRestartKeepsTheCopy(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mo := delay.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.DataDir, mo.Realtime = testutil.ReusableAddr(t), testutil.ReusableAddr(t), t.TempDir(), []string{rtAddr}
	m, err := delay.New(mo, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	sl := startDelayWith(t, slaveOptions(t, t.TempDir(), mo.Addr, rtAddr))
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(mo.Addr))),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	sendDelayed(t, p, "before", 200, time.Now().Add(time.Hour))
	waitPending := func(n int64) {
		t.Helper()
		testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if got := sl.Stats().Pending; got != n {
				return fmt.Errorf("slave holds %d pending, want %d", got, n)
			}
			return nil
		})
	}
	waitPending(200)
	before, err := gaugeAt(mo.HTTPAddr, "qmq_delay_sync_bytes_served")
	if err != nil || before == 0 {
		t.Fatalf("bytes served before the restart: %v (%v)", before, err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m = startDelayWith(t, mo)
	sendDelayed(t, p, "after", 2, time.Now().Add(time.Hour))
	waitPending(202)
	after, err := gaugeAt(mo.HTTPAddr, "qmq_delay_sync_bytes_served")
	if err != nil {
		t.Fatal(err)
	}
	if after <= 0 || after > before/50 {
		t.Fatalf("after the restart the master sent %v bytes for 2 new messages (%v for the first 200): the copy was not kept", after, before)
	}
}
