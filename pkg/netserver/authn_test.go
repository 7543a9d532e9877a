package netserver

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

const (
	billingSecret = "billing-secret-0123"
	adminSecret   = "admin-secret-012345"
)

var (
	hashOnce   sync.Once
	hashes     map[string]*auth.SecretHash
	hashFailed error
)

// testEntries returns the tests' identities: billing (an app that may
// publish order.*), ops (an admin), and whatever extra adds. The secrets
// are hashed once per test binary (the hash is slow on purpose).
func testEntries(t testing.TB, version uint64, billing auth.Grants, disabled bool) *auth.Policy {
	t.Helper()
	hashOnce.Do(func() {
		hashes = map[string]*auth.SecretHash{}
		for name, secret := range map[string]string{"billing": billingSecret, "ops": adminSecret} {
			h, err := auth.HashSecret(secret)
			if err != nil {
				hashFailed = err
				return
			}
			hashes[name] = h
		}
	})
	if hashFailed != nil {
		t.Fatal(hashFailed)
	}
	p, err := auth.NewPolicy(version, []auth.Entry{
		{Name: "billing", Kind: auth.KindApp, Secret: hashes["billing"], Grants: billing, Disabled: disabled},
		{Name: "ops", Kind: auth.KindAdmin, Secret: hashes["ops"], Grants: auth.Grants{Admin: auth.AdminWrite}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var billingGrants = auth.Grants{Publish: []string{"order.*"}, Consume: []string{"order.*"}, Groups: []string{"billing"}}

// authFrame is a CmdAuth request.
func authFrame(t testing.TB, id uint64, name, secret string) []byte {
	t.Helper()
	body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: name, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.AppendRequest(nil, protocol.CmdAuth, id, body)
}

// login sends CmdAuth on c and checks the answer's status.
func (c *rawConn) login(t testing.TB, id uint64, name, secret string, want protocol.Status) protocol.Frame {
	t.Helper()
	c.send(t, authFrame(t, id, name, secret))
	f := c.readFrame(t)
	if f.Header.RequestID != id || f.Header.Status() != want {
		t.Fatalf("CmdAuth %s answered %v (request %d) %q, want %v", name, f.Header.Status(), f.Header.RequestID, f.Body, want)
	}
	return f
}

// request sends cmd on c and returns the answer.
func (c *rawConn) request(t testing.TB, cmd protocol.Command, id uint64, body []byte) protocol.Frame {
	t.Helper()
	c.send(t, protocol.AppendRequest(nil, cmd, id, body))
	f := c.readFrame(t)
	if f.Header.RequestID != id {
		t.Fatalf("request %d answered as %d", id, f.Header.RequestID)
	}
	return f
}

// whoami is a handler that answers CmdSend with the connection's
// principal ("kind:name", or "open") and counts what it served.
type whoami struct {
	served atomic.Int64
	mux    *Mux
}

func newWhoami() *whoami {
	w := &whoami{mux: NewMux()}
	w.mux.HandleFunc(protocol.CmdSend, func(r *Request) {
		w.served.Add(1)
		p := r.Conn.Principal()
		if p.IsOpen() {
			r.Reply(protocol.StatusOK, []byte("open"))
			return
		}
		if !p.CanPublish(string(r.Body)) {
			r.Refuse(protocol.StatusForbidden, "may not publish to "+string(r.Body))
			return
		}
		r.Reply(protocol.StatusOK, []byte(p.String()))
	})
	return w
}

func TestAuth_RequestsBeforeAuthAreRefused(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	w := newWhoami()
	s := startServer(t, Options{Auth: a, RequireAuth: true}, w.mux)
	c := dial(t, s)

	// Before authentication: ping works, anything else is refused on the
	// loop and never reaches the handler.
	if f := c.request(t, protocol.CmdPing, 1, []byte("hi")); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("ping answered %v", f.Header.Status())
	}
	for id := uint64(2); id < 5; id++ {
		f := c.request(t, protocol.CmdSend, id, []byte("order.created"))
		if f.Header.Status() != protocol.StatusUnauthenticated || !strings.Contains(string(f.Body), "authenticate") {
			t.Fatalf("send before auth answered %v %q", f.Header.Status(), f.Body)
		}
	}
	if n := w.served.Load(); n != 0 {
		t.Fatalf("the handler saw %d requests before authentication", n)
	}

	// A wrong secret and an unknown name get the same answer.
	c.login(t, 10, "billing", "wrong-secret-00000", protocol.StatusUnauthenticated)
	c.login(t, 11, "nobody", billingSecret, protocol.StatusUnauthenticated)
	if f := c.request(t, protocol.CmdSend, 12, []byte("order.created")); f.Header.Status() != protocol.StatusUnauthenticated {
		t.Fatalf("send after a failed auth answered %v", f.Header.Status())
	}

	f := c.login(t, 13, "billing", billingSecret, protocol.StatusOK)
	resp, err := protocol.DecodeAuthResponse(f.Body)
	if err != nil || resp.Name != "billing" || resp.Kind != uint8(auth.KindApp) {
		t.Fatalf("auth response %+v, %v", resp, err)
	}
	if f := c.request(t, protocol.CmdSend, 14, []byte("order.created")); f.Header.Status() != protocol.StatusOK || string(f.Body) != "app:billing" {
		t.Fatalf("send after auth answered %v %q", f.Header.Status(), f.Body)
	}
	if f := c.request(t, protocol.CmdSend, 15, []byte("user.created")); f.Header.Status() != protocol.StatusForbidden {
		t.Fatalf("a forbidden send answered %v", f.Header.Status())
	}
	st := s.Stats()
	if st.RefusedUnauthenticated != 6 || st.RefusedForbidden != 1 {
		t.Fatalf("refusals counted %+v, want 6 unauthenticated (4 requests, 2 CmdAuth) and 1 forbidden", st)
	}
	if s.logs.FilterMessage("refused request").Len() == 0 {
		t.Fatal("refusals not logged")
	}
	for _, e := range s.logs.FilterMessage("refused request").All() {
		m := e.ContextMap()
		if m["remote"] == nil || m["identity"] == nil || m["reason"] == nil {
			t.Fatalf("refusal logged without identity, remote or reason: %v", m)
		}
		if strings.Contains(e.Message+strings.Join(func() []string {
			var v []string
			for _, x := range m {
				if s, ok := x.(string); ok {
					v = append(v, s)
				}
			}
			return v
		}(), " "), billingSecret) {
			t.Fatal("a secret was logged")
		}
	}
}

func TestAuth_ThreeFailuresClose(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	s := startServer(t, Options{Auth: a, RequireAuth: true}, NewMux())
	c := dial(t, s)
	for id := uint64(1); id <= maxAuthFailures; id++ {
		c.login(t, id, "billing", "wrong-secret-00000", protocol.StatusUnauthenticated)
	}
	c.waitClosed(t)
	s.waitLog(t, "failed CmdAuth 3 times")

	// A connection that gets it right on the third try stays.
	c = dial(t, s)
	c.login(t, 1, "billing", "wrong-secret-00000", protocol.StatusUnauthenticated)
	c.login(t, 2, "billing", "wrong-secret-00000", protocol.StatusUnauthenticated)
	c.login(t, 3, "billing", billingSecret, protocol.StatusOK)
	if f := c.request(t, protocol.CmdPing, 4, nil); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("ping after auth answered %v", f.Header.Status())
	}
}

func TestAuth_PolicyChangeRefreshesPrincipal(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	w := newWhoami()
	s := startServer(t, Options{Auth: a, RequireAuth: true}, w.mux)
	c := dial(t, s)
	c.login(t, 1, "billing", billingSecret, protocol.StatusOK)
	if f := c.request(t, protocol.CmdSend, 2, []byte("user.created")); f.Header.Status() != protocol.StatusForbidden {
		t.Fatalf("send to user.* answered %v, want forbidden", f.Header.Status())
	}

	// The grants change: the next request runs with the new ones.
	a.Update(testEntries(t, 2, auth.Grants{Publish: []string{"user.*"}}, false))
	if f := c.request(t, protocol.CmdSend, 3, []byte("user.created")); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("send to user.* after the grant answered %v %q", f.Header.Status(), f.Body)
	}

	// The identity is disabled: refused from the next request on, and it
	// no longer counts against its identity's connections.
	a.Update(testEntries(t, 3, billingGrants, true))
	served := w.served.Load()
	if f := c.request(t, protocol.CmdSend, 4, []byte("order.created")); f.Header.Status() != protocol.StatusUnauthenticated {
		t.Fatalf("send of a disabled identity answered %v", f.Header.Status())
	}
	if w.served.Load() != served {
		t.Fatal("the handler saw a request of a disabled identity")
	}
	if n := s.identities.count(&auth.Principal{Name: "billing", Kind: auth.KindApp}); n != 0 {
		t.Fatalf("a disabled identity still counts %d connections", n)
	}

	// Re-enabled, it authenticates again.
	a.Update(testEntries(t, 4, billingGrants, false))
	c.login(t, 5, "billing", billingSecret, protocol.StatusOK)
	if f := c.request(t, protocol.CmdSend, 6, []byte("order.created")); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("send after re-authenticating answered %v", f.Header.Status())
	}
}

func TestAuth_NotRequired(t *testing.T) {
	t.Run("with an authority", func(t *testing.T) {
		a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
		w := newWhoami()
		s := startServer(t, Options{Auth: a}, w.mux)
		c := dial(t, s)
		if f := c.request(t, protocol.CmdSend, 1, nil); string(f.Body) != "open" {
			t.Fatalf("principal before CmdAuth %q, want open", f.Body)
		}
		// CmdAuth is checked and answered (a client configured with
		// credentials learns they are wrong); a wrong one changes nothing,
		// a right one holds the connection to its identity's grants.
		c.login(t, 2, "billing", "wrong-secret-00000", protocol.StatusUnauthenticated)
		if f := c.request(t, protocol.CmdSend, 3, nil); string(f.Body) != "open" {
			t.Fatalf("principal after a failed CmdAuth %q, want open", f.Body)
		}
		c.login(t, 4, "billing", billingSecret, protocol.StatusOK)
		if f := c.request(t, protocol.CmdSend, 5, []byte("order.created")); string(f.Body) != "app:billing" {
			t.Fatalf("principal after CmdAuth %q, want app:billing", f.Body)
		}
		if f := c.request(t, protocol.CmdSend, 6, []byte("user.x")); f.Header.Status() != protocol.StatusForbidden {
			t.Fatalf("a send outside billing's grants answered %v", f.Header.Status())
		}
		// Disabled: the identity is dropped and the connection is open
		// again (the server does not require authentication).
		a.Update(testEntries(t, 2, billingGrants, true))
		if f := c.request(t, protocol.CmdSend, 7, nil); string(f.Body) != "open" {
			t.Fatalf("principal after the identity was disabled %q, want open", f.Body)
		}
	})
	t.Run("without an authority", func(t *testing.T) {
		s := startServer(t, Options{}, newWhoami().mux)
		c := dial(t, s)
		f := c.login(t, 1, "billing", "anything-at-all-000", protocol.StatusOK)
		if resp, err := protocol.DecodeAuthResponse(f.Body); err != nil || resp.Name != auth.Open.Name {
			t.Fatalf("auth response %+v, %v", resp, err)
		}
	})
}

func TestAuth_MaxConnsPerIdentity(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	s := startServer(t, Options{Auth: a, RequireAuth: true, MaxConnsPerIdentity: 2}, NewMux())
	first, second := dial(t, s), dial(t, s)
	first.login(t, 1, "billing", billingSecret, protocol.StatusOK)
	second.login(t, 1, "billing", billingSecret, protocol.StatusOK)
	third := dial(t, s)
	f := third.login(t, 1, "billing", billingSecret, protocol.StatusBusy)
	if !strings.Contains(string(f.Body), "MaxConnsPerIdentity") {
		t.Fatalf("over the identity's limit answered %q", f.Body)
	}
	third.waitClosed(t)
	s.waitLog(t, "over MaxConnsPerIdentity")

	// Another identity is not affected, and a slot frees on close.
	dial(t, s).login(t, 1, "ops", adminSecret, protocol.StatusOK)
	first.Close()
	waitFor(t, 5*time.Second, "a free slot for billing", func() bool {
		c := dial(t, s)
		defer c.Close()
		c.send(t, authFrame(t, 1, "billing", billingSecret))
		f, err := c.tryReadFrame(5 * time.Second)
		return err == nil && f.Header.Status() == protocol.StatusOK
	})
}

func TestAuth_RefusalLogIsRateLimited(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	s := startServer(t, Options{Auth: a, RequireAuth: true}, NewMux())
	c := dial(t, s)
	const n = 200
	var b []byte
	for id := uint64(1); id <= n; id++ {
		b = protocol.AppendRequest(b, protocol.CmdSend, id, nil)
	}
	c.send(t, b)
	for range n {
		if f := c.readFrame(t); f.Header.Status() != protocol.StatusUnauthenticated {
			t.Fatalf("answered %v", f.Header.Status())
		}
	}
	if got := s.Stats().RefusedUnauthenticated; got != n {
		t.Fatalf("counted %d refusals, want %d", got, n)
	}
	if lines := s.logs.FilterMessage("refused request").Len(); lines > noisyLogBurst+2 {
		t.Fatalf("%d refusals logged %d lines", n, lines)
	}
}

func TestAuth_CloseWaitsForCmdAuth(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	s := startServer(t, Options{Auth: a, RequireAuth: true}, NewMux())
	c := dial(t, s)
	c.send(t, authFrame(t, 1, "billing", billingSecret))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Close(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	// Answered (or refused: the server was closing when it read it), or
	// the connection closed: never hung.
	if f, err := c.tryReadFrame(5 * time.Second); err == nil &&
		f.Header.Status() != protocol.StatusOK && f.Header.Status() != protocol.StatusShuttingDown {
		t.Fatalf("CmdAuth during Close answered %v", f.Header.Status())
	}
}

// TestAuth_LargeFrameBeforeAuthCountsWhatCame: a connection not yet
// authenticated that sends the header of a large frame and a little of
// its body holds only the chunk for what came (no buffer reserved whole
// for its header), and once authenticated its next large frame is
// reserved whole.
func TestAuth_LargeFrameBeforeAuthCountsWhatCame(t *testing.T) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	s := startServer(t, Options{Auth: a, RequireAuth: true, MaxFrameSize: 1 << 20}, NewMux())
	const frame, sent = 1 << 20, 1000
	stranger := dial(t, s)
	stranger.send(t, append(header(1, frame), make([]byte, sent)...))
	waitFor(t, 5*time.Second, "the stranger's frame held", func() bool { return s.Stats().PartialBytes > 0 })
	if got := s.Stats().PartialBytes; got != partialChunkSize {
		t.Fatalf("an unauthenticated large frame holds %d bytes, want one chunk (%d)", got, partialChunkSize)
	}
	stranger.Close()
	waitFor(t, 5*time.Second, "the stranger's bytes released", func() bool { return s.Stats().PartialBytes == 0 })

	member := dial(t, s)
	member.login(t, 1, "billing", billingSecret, protocol.StatusOK)
	member.send(t, append(header(2, frame), make([]byte, sent)...))
	waitFor(t, 5*time.Second, "the member's frame reserved whole", func() bool {
		return s.Stats().PartialBytes == protocol.HeaderSize+frame
	})
	member.send(t, make([]byte, frame-sent))
	if f := member.readFrame(t); f.Header.Status() != protocol.StatusOK || len(f.Body) != frame {
		t.Fatalf("the member's large ping answered %v with %d bytes", f.Header.Status(), len(f.Body))
	}
	waitFor(t, 5*time.Second, "no partial bytes", func() bool { return s.Stats().PartialBytes == 0 })
}
