package realtime_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// matrixTransport is fastTransport with a long dial: a first CmdAuth of
// an identity costs the server its slow secret hash (seconds under the race
// detector on a loaded machine, one at a time), and the dial waits for it.
var matrixTransport = func() transport.Options {
	o := fastTransport
	o.DialTimeout = 30 * time.Second
	return o
}()

// The authorization matrix of a realtime broker's TCP port (issue 29): a
// broker that requires authentication, its policy from a meta server, is
// sent every command it serves (the Mux registration in broker.go: send,
// pull, ack, consumer-manage, broker-stats, dead-letters, sync-log,
// sync-epoch, switchover) by a connection with no credential, with a wrong
// one, and by identities that lack the right. Each is refused with its
// status (unauthenticated, or forbidden naming the subject where there is
// one) and the broker's state (log ends, epoch and write state, every
// group's cursor and consumers, the dead letters, what its slave copied) is
// the same afterwards. Its ops HTTP port serves profiles to admin readers
// only.

const (
	matrixGroup   = "authz"
	matrixSubject = "orders"
	matrixCGroup  = "billing"
)

// matrixBroker is one master that requires authentication, its meta
// server, and the credentials of each identity.
type matrixBroker struct {
	b    *realtime.Broker
	addr string
	// app may publish and consume orders as billing; viewer is a read
	// admin, ops a write admin, other a broker of another group.
	app, viewer, ops, other auth.Credentials
	dead                    []string // ids of orders/billing's dead letters
	dir                     string   // the data directory
}

func newIdentity(t *testing.T, meta *metaserver.Server, req api.IdentityRequest) auth.Credentials {
	t.Helper()
	out, err := api.NewClient(meta.HTTPAddr().String(), "t", 10*time.Second).CreateIdentity(context.Background(), req)
	if err != nil {
		t.Fatalf("identity %s: %v", req.Name, err)
	}
	c, err := auth.ParseCredentials(out.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientAs returns a transport that authenticates as c (nil: none).
func clientAs(t *testing.T, c *auth.Credentials) *transport.Client {
	t.Helper()
	o := matrixTransport
	o.Credentials = c
	tc, err := transport.New(o, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	return tc
}

func startMatrixBroker(t *testing.T) *matrixBroker {
	t.Helper()
	meta, _ := startFailoverMeta(t, 10*time.Second) // a lease that outlasts a loaded machine's stalls
	m := &matrixBroker{
		app: newIdentity(t, meta, api.IdentityRequest{Name: "billing", Kind: "app", Grants: api.Grants{
			Publish: []string{matrixSubject}, Consume: []string{matrixSubject}, Groups: []string{matrixCGroup}}}),
		viewer: newIdentity(t, meta, api.IdentityRequest{Name: "viewer", Kind: "admin", Grants: api.Grants{Admin: "read"}}),
		ops:    newIdentity(t, meta, api.IdentityRequest{Name: "ops", Kind: "admin", Grants: api.Grants{Admin: "write"}}),
		other:  newIdentity(t, meta, api.IdentityRequest{Name: "elsewhere", Kind: "broker"}),
	}
	self := newIdentity(t, meta, api.IdentityRequest{Name: matrixGroup, Kind: "broker"})

	o := realtime.NewOptions()
	// A data directory the broker makes: its modes are checked after the run.
	o.Group, o.Addr, o.HTTPAddr, o.DataDir = matrixGroup, "127.0.0.1:0", "127.0.0.1:0", filepath.Join(t.TempDir(), "data")
	o.MetaServers, o.Role = []string{meta.Addr().String()}, realtime.RoleMaster
	o.SegmentSize, o.ConsumerTimeout, o.RetryDelay = 8<<20, 2*time.Second, 100*time.Millisecond
	o.Secure.RequireAuth, o.Secure.Credentials = true, self
	b, err := realtime.New(o, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	m.b, m.addr, m.dir = b, b.Addr().String(), o.DataDir
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if st := b.Replication(); st.Role != realtime.RoleMaster || st.Epoch == 0 {
			return fmt.Errorf("not master yet: %+v", st)
		}
		return nil
	})

	// The policy reached the broker once the application authenticates.
	probe := clientAs(t, &m.app)
	testutil.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		_, err := probe.Call(context.Background(), m.addr, protocol.CmdBrokerStats, protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{}))
		if errors.Is(err, protocol.ErrForbidden) {
			return nil // authenticated, and refused as an application
		}
		return fmt.Errorf("the application is not known yet: %v", err)
	})

	// State to protect: messages, a group with a cursor, dead letters.
	p, err := producer.New(producer.WithBrokers(m.addr), producer.WithCredentials(m.app),
		producer.WithTransportOptions(matrixTransport), producer.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	c, err := consumer.New(consumer.WithBrokers(m.addr), consumer.WithConsumerID("c1"), consumer.WithCredentials(m.app),
		consumer.WithTransportOptions(matrixTransport), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(matrixSubject, matrixCGroup, func(ctx context.Context, msg *consumer.Message) error {
		return errors.New("always fails: a dead letter")
	}, consumer.StartEarliest(), consumer.MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		msg := &producer.Message{Subject: matrixSubject, Body: []byte(fmt.Sprintf("secret body %d", i))}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := p.Send(ctx, msg)
		cancel()
		if err != nil {
			t.Fatalf("send as the application: %v", err)
		}
		m.dead = append(m.dead, msg.ID)
	}
	admin := clientAs(t, &m.ops)
	testutil.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := m.deadLetters(t, admin); n != 3 {
			return fmt.Errorf("%d dead letters, want 3", n)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// deadLetters counts orders/billing's dead letters (as an admin).
func (m *matrixBroker) deadLetters(t *testing.T, admin *transport.Client) uint64 {
	t.Helper()
	resp, err := admin.Call(context.Background(), m.addr, protocol.CmdDeadLetters, protocol.AppendDeadLettersRequest(nil,
		&protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: matrixSubject, Group: matrixCGroup}))
	if err != nil {
		t.Fatalf("list dead letters as an admin: %v", err)
	}
	dl, err := protocol.DecodeDeadLettersResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	return dl.Total
}

// state is everything a refused command could have changed, read as the
// write admin.
func (m *matrixBroker) state(t *testing.T, admin *transport.Client) string {
	t.Helper()
	var s strings.Builder
	st := m.b.Replication()
	fmt.Fprintf(&s, "role %s epoch %d write %v messages %d actions %d slave %d/%d served %d\n", st.Role, st.Epoch,
		st.WriteState, st.MessageEnd, st.ActionEnd, st.SlaveOffset, st.SlaveActionOffset, st.SyncServed)
	resp, err := admin.Call(context.Background(), m.addr, protocol.CmdBrokerStats, protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{}))
	if err != nil {
		t.Fatalf("stats as an admin: %v", err)
	}
	stats, err := protocol.DecodeBrokerStatsResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range stats.Subjects {
		fmt.Fprintf(&s, "%s: %d messages\n", sub.Subject, sub.Messages)
		for _, g := range sub.Groups {
			fmt.Fprintf(&s, "  %s: cursor %d backlog %d", g.Group, g.Cursor, g.Backlog)
			for _, c := range g.Consumers {
				fmt.Fprintf(&s, " [%s flags %d unacked %d]", c.Consumer, c.Flags, c.Unacked)
			}
			s.WriteByte('\n')
		}
	}
	fmt.Fprintf(&s, "dead letters %d\n", m.deadLetters(t, admin))
	return s.String()
}

// matrixCommand is one request to the broker.
type matrixCommand struct {
	name string
	cmd  protocol.Command
	body []byte
	// names is what a forbidden answer must name ("" for commands about
	// no subject).
	names string
	// perMessage: the command is answered OK with a status per message
	// (send); the refusal is that status.
	perMessage bool
}

func matrixSend(t *testing.T, subject string) []byte {
	msg, err := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: "intruder-" + subject,
		Body: []byte("must not be stored"), Created: time.Now()}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.AppendSendRequest(nil, 0, [][]byte{msg})
}

// realtimeCommands returns one request of each kind the broker serves,
// about subject and consumer group.
func realtimeCommands(t *testing.T, subject, group string, ids []string) []matrixCommand {
	dead := func(a protocol.DeadLetterAction) []byte {
		return protocol.AppendDeadLettersRequest(nil, &protocol.DeadLettersRequest{Action: a, Subject: subject, Group: group, IDs: ids})
	}
	manage := func(a protocol.ManageAction) []byte {
		return protocol.AppendConsumerManageRequest(nil, &protocol.ConsumerManageRequest{Action: a, Subject: subject, Group: group, Consumer: "c1", Time: time.Now()})
	}
	return []matrixCommand{
		{name: "send", cmd: protocol.CmdSend, body: matrixSend(t, subject), names: subject, perMessage: true},
		{name: "pull", cmd: protocol.CmdPull, names: subject, body: protocol.AppendPullRequest(nil, &protocol.PullRequest{
			Subject: subject, Group: group, ConsumerID: "intruder", Max: 10, KnownPullSeq: -1})},
		{name: "ack", cmd: protocol.CmdAck, names: subject, body: protocol.AppendAckRequest(nil, &protocol.AckRequest{
			Subject: subject, Group: group, ConsumerID: "c1", First: 0, Last: 2})},
		{name: "reset-earliest", cmd: protocol.CmdConsumerManage, body: manage(protocol.ManageResetEarliest)},
		{name: "reset-latest", cmd: protocol.CmdConsumerManage, body: manage(protocol.ManageResetLatest)},
		{name: "reset-time", cmd: protocol.CmdConsumerManage, body: manage(protocol.ManageResetTime)},
		{name: "consumer-offline", cmd: protocol.CmdConsumerManage, body: manage(protocol.ManageConsumerOffline)},
		{name: "consumer-online", cmd: protocol.CmdConsumerManage, body: manage(protocol.ManageConsumerOnline)},
		{name: "broker-stats", cmd: protocol.CmdBrokerStats, body: protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{Subject: subject})},
		{name: "dead-letters list", cmd: protocol.CmdDeadLetters, body: dead(protocol.DeadLettersList), names: subject},
		{name: "dead-letters inspect", cmd: protocol.CmdDeadLetters, body: dead(protocol.DeadLettersInspect), names: subject},
		{name: "dead-letters redrive", cmd: protocol.CmdDeadLetters, body: dead(protocol.DeadLettersRedrive), names: subject},
		{name: "dead-letters purge", cmd: protocol.CmdDeadLetters, body: dead(protocol.DeadLettersPurge), names: subject},
		{name: "sync-log", cmd: protocol.CmdSyncLog, body: protocol.AppendSyncRequest(nil, &protocol.SyncRequest{
			Group: matrixGroup, MessageSegmentSize: 8 << 20, ActionSegmentSize: 8 << 20, MaxBytes: 1 << 20, SlaveID: "intruder"})},
		{name: "sync-epoch", cmd: protocol.CmdSyncEpoch, body: protocol.AppendSyncEpochRequest(nil, &protocol.SyncEpochRequest{Group: matrixGroup})},
		{name: "switchover", cmd: protocol.CmdSwitchover, body: protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{
			Group: matrixGroup, Timeout: time.Second})},
	}
}

// expectRefused sends c and checks it is refused with want.
func expectRefused(t *testing.T, tc *transport.Client, addr, caller string, c matrixCommand, want protocol.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tc.Call(ctx, addr, c.cmd, c.body)
	if c.perMessage && err == nil {
		st, derr := protocol.DecodeSendResponse(resp)
		if derr != nil || len(st) != 1 || st[0] != want {
			t.Errorf("%s as %s: message statuses %v (%v), want %v", c.name, caller, st, derr, want)
		}
		return
	}
	var pe *protocol.Error
	switch {
	case err == nil:
		t.Errorf("%s as %s: served, want %v", c.name, caller, want)
	case !errors.As(err, &pe) || pe.Status != want:
		t.Errorf("%s as %s: %v, want %v", c.name, caller, err, want)
	case want == protocol.StatusForbidden && c.names != "" && !strings.Contains(err.Error(), c.names):
		t.Errorf("%s as %s: the refusal %q does not name %s", c.name, caller, err, c.names)
	}
}

// TestAuthzMatrix_RealtimeTCP runs the matrix described at the top of the
// file against one broker.
func TestAuthzMatrix_RealtimeTCP(t *testing.T) {
	m := startMatrixBroker(t)
	admin := clientAs(t, &m.ops)
	// Settled: the closed consumer's acks and the action log committed
	// (the same state on reads 300 ms apart).
	var before string
	testutil.CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		before = m.state(t, admin)
		time.Sleep(300 * time.Millisecond)
		if again := m.state(t, admin); again != before {
			return fmt.Errorf("still changing:\n%s\n%s", before, again)
		}
		return nil
	})

	// No credential: every command is refused unauthenticated.
	anon := clientAs(t, nil)
	for _, c := range realtimeCommands(t, matrixSubject, matrixCGroup, m.dead) {
		c.perMessage = false // the whole request is refused, not its messages
		expectRefused(t, anon, m.addr, "no credential", c, protocol.StatusUnauthenticated)
	}
	// A wrong secret of a known identity, and an unknown identity: the
	// CmdAuth is refused, and so is every command after it on the same
	// connection.
	for _, creds := range []auth.Credentials{{Name: m.app.Name, Secret: "not-the-secret-of-billing"}, {Name: "nobody", Secret: "whatever-secret-it-is"}} {
		rc := testutil.DialRaw(t, m.addr)
		body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: creds.Name, Secret: creds.Secret})
		if err != nil {
			t.Fatal(err)
		}
		if st, msg := rc.Call(protocol.CmdAuth, body); st != protocol.StatusUnauthenticated {
			t.Fatalf("auth as %s with a wrong secret: %v %s", creds.Name, st, msg)
		}
		for _, c := range realtimeCommands(t, matrixSubject, matrixCGroup, m.dead) {
			if st, msg := rc.Call(c.cmd, c.body); st != protocol.StatusUnauthenticated {
				t.Errorf("%s after a failed auth as %s: %v %s, want unauthenticated", c.name, creds.Name, st, msg)
			}
		}
	}
	// Identities that lack the right.
	app, viewer, other := clientAs(t, &m.app), clientAs(t, &m.viewer), clientAs(t, &m.other)
	byName := func(cs []matrixCommand) map[string]matrixCommand {
		out := map[string]matrixCommand{}
		for _, c := range cs {
			out[c.name] = c
		}
		return out
	}
	own := byName(realtimeCommands(t, matrixSubject, matrixCGroup, m.dead))
	elsewhere := byName(realtimeCommands(t, "payments", matrixCGroup, nil))
	otherGroup := byName(realtimeCommands(t, matrixSubject, "shipping", nil))
	retryOfOther := byName(realtimeCommands(t, "%RETRY%"+matrixSubject+"%shipping", "shipping", nil))
	reads, write, copying := []string{"broker-stats"}, []string{"reset-earliest", "reset-latest", "reset-time",
		"consumer-offline", "consumer-online", "dead-letters redrive", "dead-letters purge", "switchover"}, []string{"sync-log", "sync-epoch"}
	bodies := []string{"dead-letters list", "dead-letters inspect"}
	cases := []struct {
		caller string
		tc     *transport.Client
		cmds   []matrixCommand
	}{
		{"application, another subject", app, pick(elsewhere, "send", "pull", "ack")},
		{"application, another group", app, pick(otherGroup, "pull", "ack")},
		{"application, another group's retry subject", app, pick(retryOfOther, "send", "pull", "ack")},
		{"application, admin commands", app, pick(own, append(append(append(reads, write...), bodies...), copying...)...)},
		{"read admin, writes, bodies and data", viewer, pick(own, append(append(append(write, bodies...), copying...), "send", "pull", "ack")...)},
		{"write admin, replication", clientAs(t, &m.ops), pick(own, copying...)},
		{"broker of another group", other, pick(own, append(append(copying, write...), bodies...)...)},
	}
	for _, cs := range cases {
		for _, c := range cs.cmds {
			expectRefused(t, cs.tc, m.addr, cs.caller, c, protocol.StatusForbidden)
		}
	}

	if after := m.state(t, admin); after != before {
		t.Fatalf("refused commands changed the broker:\nbefore %s\nafter  %s", before, after)
	}
	// The ops HTTP port: profiles (and the command line) need admin read.
	for _, c := range []struct {
		name, authz string
		want        int
	}{
		{"no credential", "", http.StatusUnauthorized},
		{"wrong secret", "Bearer " + m.app.Name + ":not-the-secret-of-billing", http.StatusUnauthorized},
		{"application", "Bearer " + m.app.String(), http.StatusForbidden},
		{"read admin", "Bearer " + m.viewer.String(), http.StatusOK},
	} {
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
			req, err := http.NewRequest("GET", "http://"+m.b.HTTPAddr().String()+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.authz != "" {
				req.Header.Set("Authorization", c.authz)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("GET %s as %s: HTTP %d, want %d", path, c.name, resp.StatusCode, c.want)
			}
		}
	}
	// The same identities are served what they may do: the refusals were
	// about the right, not a broken connection.
	if _, err := app.Call(context.Background(), m.addr, protocol.CmdSend, matrixSend(t, matrixSubject)); err != nil {
		t.Fatalf("a send the application may make: %v", err)
	}
	if _, err := viewer.Call(context.Background(), m.addr, protocol.CmdBrokerStats, own["broker-stats"].body); err != nil {
		t.Fatalf("stats as a read admin: %v", err)
	}
	// After the run (messages, dead letters, the policy copy, the epoch
	// history): every file 0600, every directory 0700.
	testutil.RequirePrivateTree(t, m.dir)
}

// A broker refuses to listen on a non-loopback address (TCP or HTTP)
// without TLS and --auth unless told --insecure.
func TestSecure_RealtimeRefusesExposedListener(t *testing.T) {
	for _, c := range []struct {
		name      string
		mod       func(*realtime.Options)
		wantError bool
	}{
		{"TCP on all interfaces", func(o *realtime.Options) { o.Addr = "0.0.0.0:0" }, true},
		{"HTTP on all interfaces", func(o *realtime.Options) { o.HTTPAddr = "0.0.0.0:0" }, true},
		{"TCP on all interfaces with --auth but no TLS", func(o *realtime.Options) { o.Addr, o.Secure.RequireAuth = "0.0.0.0:0", true }, true},
		{"TCP on all interfaces, --insecure", func(o *realtime.Options) { o.Addr, o.Secure.Insecure = "0.0.0.0:0", true }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := realtime.NewOptions()
			o.Addr, o.HTTPAddr, o.DataDir = "127.0.0.1:0", "", t.TempDir()
			c.mod(&o)
			b, err := realtime.New(o, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
			if !c.wantError {
				if err != nil {
					t.Fatalf("refused with --insecure: %v", err)
				}
				b.Close(context.Background())
				return
			}
			if !errors.Is(err, exposure.ErrInsecureListener) {
				if err == nil {
					b.Close(context.Background())
				}
				t.Fatalf("New = %v, want ErrInsecureListener", err)
			}
		})
	}
}

// pick returns the named commands of cs.
func pick(cs map[string]matrixCommand, names ...string) []matrixCommand {
	out := make([]matrixCommand, 0, len(names))
	for _, n := range names {
		c, ok := cs[n]
		if !ok {
			panic("no command " + n)
		}
		out = append(out, c)
	}
	return out
}
