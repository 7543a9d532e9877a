package delay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
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

// The authorization matrix of a delay server's TCP port (issue 29): a
// master that requires authentication, its policy from a meta server, is
// sent every command it serves (the Mux registration in server.go: send,
// delay-sync-manifest, delay-sync-read, delay-sync-origin, switchover) by a
// connection with no credential, with a wrong one, and by identities that
// lack the right. Each is refused with its status (unauthenticated, or
// forbidden; a send per message) and the server's state (role, epoch,
// write state, the stored and pending messages, its slave's lag) is the
// same afterwards. Its ops HTTP port serves profiles to admin readers only.

const delayMatrixGroup = "dauthz"

func delayIdentity(t *testing.T, meta *metaserver.Server, req api.IdentityRequest) auth.Credentials {
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

func delayClientAs(t *testing.T, c *auth.Credentials) *transport.Client {
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

func delaySendBody(t *testing.T, subject, id string) []byte {
	msg, err := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: id, Body: []byte("a delayed body"),
		Created: time.Now(), DeliverAt: time.Now().Add(2 * time.Hour)}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.AppendSendRequest(nil, 0, [][]byte{msg})
}

type delayCommand struct {
	name       string
	cmd        protocol.Command
	body       []byte
	perMessage bool
}

func delayCommands(t *testing.T, subject string, epoch uint64) map[string]delayCommand {
	cs := []delayCommand{
		{name: "send", cmd: protocol.CmdSend, body: delaySendBody(t, subject, "intruder-"+subject), perMessage: true},
		{name: "sync-manifest", cmd: protocol.CmdDelaySyncManifest, body: protocol.AppendDelayManifestRequest(nil, &protocol.DelayManifestRequest{
			Epoch: epoch, Group: delayMatrixGroup, Acked: 1 << 40, SlaveID: "intruder"})},
		{name: "sync-read", cmd: protocol.CmdDelaySyncRead, body: protocol.AppendDelayReadRequest(nil, &protocol.DelayReadRequest{
			Epoch: epoch, Group: delayMatrixGroup, MaxBytes: 1 << 20})},
		{name: "sync-origin", cmd: protocol.CmdDelaySyncOrigin, body: protocol.AppendDelayOriginRequest(nil, &protocol.DelayOriginRequest{
			Epoch: epoch, Group: delayMatrixGroup})},
		{name: "switchover", cmd: protocol.CmdSwitchover, body: protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{
			Group: delayMatrixGroup, Timeout: time.Second})},
		{name: "find", cmd: protocol.CmdFindMessages, body: protocol.AppendFindMessagesRequest(nil, &protocol.FindMessagesRequest{
			By: protocol.FindByID, Value: "kept", Subject: subject})},
	}
	out := map[string]delayCommand{}
	for _, c := range cs {
		out[c.name] = c
	}
	return out
}

func delayState(s *delay.Server) string {
	st, r := s.Stats(), s.Replication()
	return fmt.Sprintf("role %s epoch %d write %v fenced %v readonly %v lag %d waiting %d; pending %d wal %d/%d hours %d",
		r.Role, r.Epoch, r.WriteState, r.Fenced, r.Readonly, r.LagBytes, r.WaitingAcks, st.Pending, st.WALWritten, st.WALDurable, len(st.Hours))
}

func TestAuthzMatrix_DelayTCP(t *testing.T) {
	meta := startMetaServer(t, func(o *metaserver.Options) { o.AdminToken = "t" })
	app := delayIdentity(t, meta, api.IdentityRequest{Name: "billing", Kind: "app", Grants: api.Grants{Publish: []string{"orders"}}})
	viewer := delayIdentity(t, meta, api.IdentityRequest{Name: "viewer", Kind: "admin", Grants: api.Grants{Admin: "read"}})
	ops := delayIdentity(t, meta, api.IdentityRequest{Name: "ops", Kind: "admin", Grants: api.Grants{Admin: "write"}})
	other := delayIdentity(t, meta, api.IdentityRequest{Name: "elsewhere", Kind: "broker"})
	self := delayIdentity(t, meta, api.IdentityRequest{Name: delayMatrixGroup, Kind: "broker"})

	o := delay.NewOptions()
	// A data directory the server makes: its modes are checked after the run.
	o.Group, o.Addr, o.HTTPAddr, o.DataDir = delayMatrixGroup, "127.0.0.1:0", "127.0.0.1:0", filepath.Join(t.TempDir(), "data")
	o.MetaServers, o.Role = []string{meta.Addr().String()}, delay.RoleMaster
	o.Secure.RequireAuth, o.Secure.Credentials = true, self
	// Nothing becomes due during the test: the realtime address is never dialled.
	s, err := delay.New(o, nil, route.NewStatic(route.Groups("127.0.0.1:1"), nil), zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	addr := s.Addr().String()
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if r := s.Replication(); r.Role != delay.RoleMaster || r.Epoch == 0 || r.Fenced {
			return fmt.Errorf("not a serving master yet: %+v", r)
		}
		return nil
	})
	// The policy reached the server once the application's send is stored.
	appc := delayClientAs(t, &app)
	testutil.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		resp, err := appc.Call(context.Background(), addr, protocol.CmdSend, delaySendBody(t, "orders", "kept"))
		if err != nil {
			return err
		}
		st, err := protocol.DecodeSendResponse(resp)
		if err != nil || len(st) != 1 || st[0] != protocol.StatusOK {
			return fmt.Errorf("send as the application: %v %v", st, err)
		}
		return nil
	})
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		// Settled: stored, replayed, and sampled as what a slave lacks
		// (there is none).
		st, r := s.Stats(), s.Replication()
		if st.Pending != 1 || st.WALDurable != st.WALWritten || st.Replayed != st.WALWritten || r.LagBytes != st.WALWritten {
			return fmt.Errorf("the stored message is not settled: %+v, lag %d", st, r.LagBytes)
		}
		return nil
	})
	before := delayState(s)
	epoch := s.Replication().Epoch

	expect := func(tc *transport.Client, caller string, c delayCommand, want protocol.Status) {
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
		if !errors.As(err, &pe) || pe.Status != want {
			t.Errorf("%s as %s: %v, want %v", c.name, caller, err, want)
		} else if who := strings.TrimSuffix(strings.Fields(caller)[0], ","); want == protocol.StatusForbidden && !strings.Contains(err.Error(), who) {
			t.Errorf("%s as %s: the refusal %q does not name the identity", c.name, caller, err)
		}
	}
	own := delayCommands(t, "orders", epoch)
	names := []string{"send", "sync-manifest", "sync-read", "sync-origin", "switchover", "find"}

	// No credential: every command is refused unauthenticated.
	anon := delayClientAs(t, nil)
	for _, n := range names {
		c := own[n]
		c.perMessage = false
		expect(anon, "no credential", c, protocol.StatusUnauthenticated)
	}
	// A wrong secret, an unknown identity: the CmdAuth and every command
	// after it on the connection are refused.
	for _, creds := range []auth.Credentials{{Name: "billing", Secret: "not-the-secret-of-billing"}, {Name: "nobody", Secret: "whatever-secret-it-is"}} {
		rc := testutil.DialRaw(t, addr)
		body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: creds.Name, Secret: creds.Secret})
		if err != nil {
			t.Fatal(err)
		}
		if st, msg := rc.Call(protocol.CmdAuth, body); st != protocol.StatusUnauthenticated {
			t.Fatalf("auth as %s with a wrong secret: %v %s", creds.Name, st, msg)
		}
		for _, n := range names {
			if st, msg := rc.Call(own[n].cmd, own[n].body); st != protocol.StatusUnauthenticated {
				t.Errorf("%s after a failed auth as %s: %v %s, want unauthenticated", n, creds.Name, st, msg)
			}
		}
	}
	// Identities that lack the right ("app:billing ..." names the refused
	// identity as the refusal does).
	elsewhere := delayCommands(t, "payments", epoch)
	for _, cs := range []struct {
		caller string
		tc     *transport.Client
		cmds   []delayCommand
	}{
		{"app:billing, another subject", appc, []delayCommand{elsewhere["send"]}},
		{"app:billing, replication, switchover and lookup", appc, []delayCommand{own["sync-manifest"], own["sync-read"], own["sync-origin"], own["switchover"], own["find"]}},
		{"admin:viewer", delayClientAs(t, &viewer), []delayCommand{own["send"], own["sync-manifest"], own["sync-read"], own["sync-origin"], own["switchover"]}},
		{"admin:ops, replication", delayClientAs(t, &ops), []delayCommand{own["sync-manifest"], own["sync-read"], own["sync-origin"]}},
		{"broker:elsewhere", delayClientAs(t, &other), []delayCommand{own["sync-manifest"], own["sync-read"], own["sync-origin"], own["switchover"], own["find"]}},
	} {
		for _, c := range cs.cmds {
			expect(cs.tc, cs.caller, c, protocol.StatusForbidden)
		}
	}
	if after := delayState(s); after != before {
		t.Fatalf("refused commands changed the server:\nbefore %s\nafter  %s", before, after)
	}
	// A read admin finds the application's message, pending, without its
	// body (it may not read bodies).
	resp, err := delayClientAs(t, &viewer).Call(context.Background(), addr, protocol.CmdFindMessages, own["find"].body)
	if err != nil {
		t.Fatalf("find as a read admin: %v", err)
	}
	if found, err := protocol.DecodeFindMessagesResponse(resp); err != nil || len(found.Messages) != 1 ||
		found.Messages[0].Flags != protocol.FoundScheduled|protocol.FoundBodyHidden {
		t.Fatalf("find as a read admin: %+v %v", found, err)
	}
	// The ops HTTP port: profiles (and the command line) need admin read.
	for _, c := range []struct {
		name, authz string
		want        int
	}{
		{"no credential", "", http.StatusUnauthorized},
		{"wrong secret", "Bearer billing:not-the-secret-of-billing", http.StatusUnauthorized},
		{"application", "Bearer " + app.String(), http.StatusForbidden},
		{"broker of another group", "Bearer " + other.String(), http.StatusForbidden},
		{"read admin", "Bearer " + viewer.String(), http.StatusOK},
	} {
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
			req, err := http.NewRequest("GET", "http://"+s.HTTPAddr().String()+path, nil)
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
	// After the run (the WAL, schedule files, the policy copy): every file
	// 0600, every directory 0700.
	testutil.RequirePrivateTree(t, o.DataDir)
}

// A delay server refuses to listen on a non-loopback address (TCP or HTTP)
// without TLS and --auth unless told --insecure.
func TestSecure_DelayRefusesExposedListener(t *testing.T) {
	for _, c := range []struct {
		name      string
		mod       func(*delay.Options)
		wantError bool
	}{
		{"TCP on all interfaces", func(o *delay.Options) { o.Addr = "0.0.0.0:0" }, true},
		{"HTTP on all interfaces", func(o *delay.Options) { o.HTTPAddr = "0.0.0.0:0" }, true},
		{"TCP on all interfaces with --auth but no TLS", func(o *delay.Options) { o.Addr, o.Secure.RequireAuth = "0.0.0.0:0", true }, true},
		{"TCP on all interfaces, --insecure", func(o *delay.Options) { o.Addr, o.Secure.Insecure = "0.0.0.0:0", true }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := delay.NewOptions()
			o.Addr, o.HTTPAddr, o.DataDir = "127.0.0.1:0", "", t.TempDir()
			c.mod(&o)
			s, err := delay.New(o, nil, route.NewStatic(route.Groups("127.0.0.1:1"), nil), zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
			if !c.wantError {
				if err != nil {
					t.Fatalf("refused with --insecure: %v", err)
				}
				s.Close(context.Background())
				return
			}
			if !errors.Is(err, exposure.ErrInsecureListener) {
				if err == nil {
					s.Close(context.Background())
				}
				t.Fatalf("New = %v, want ErrInsecureListener", err)
			}
		})
	}
}
