package metaclient

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// policyMeta is a fake meta server's policy side: CmdAuth checks one
// credential, CmdPolicy long-polls on the current policy.
type policyMeta struct {
	t     *testing.T
	creds auth.Credentials

	mu      sync.Mutex
	down    bool
	policy  *auth.Policy
	encoded []byte
	changed chan struct{}
	authed  int
	asked   []uint64 // versions requests named
}

func newPolicyMeta(t *testing.T, creds auth.Credentials) *policyMeta {
	return &policyMeta{t: t, creds: creds, changed: make(chan struct{})}
}

func (m *policyMeta) set(p *auth.Policy) {
	b, err := json.Marshal(p)
	if err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	m.policy, m.encoded = p, b
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *policyMeta) setDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

func (m *policyMeta) Call(ctx context.Context, addr string, cmd protocol.Command, body []byte) ([]byte, error) {
	m.mu.Lock()
	down := m.down
	m.mu.Unlock()
	if down {
		return nil, errors.New("connection refused")
	}
	switch cmd {
	case protocol.CmdAuth:
		q, err := protocol.DecodeAuthRequest(body)
		if err != nil {
			return nil, err
		}
		if q.Name != m.creds.Name || q.Secret != m.creds.Secret {
			return nil, protocol.Errorf(protocol.StatusUnauthenticated, "wrong secret")
		}
		m.mu.Lock()
		m.authed++
		m.mu.Unlock()
		return protocol.AppendAuthResponse(nil, &protocol.AuthResponse{Name: q.Name, Kind: uint8(auth.KindBroker), Group: q.Name}), nil
	case protocol.CmdPolicy:
		q, err := protocol.DecodePolicyRequest(body)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.asked = append(m.asked, q.Version)
		m.mu.Unlock()
		timer := time.NewTimer(q.Wait)
		defer timer.Stop()
		for {
			m.mu.Lock()
			p, enc, ch := m.policy, m.encoded, m.changed
			m.mu.Unlock()
			var v uint64
			if p != nil {
				v = p.Version()
			}
			if v > q.Version {
				return protocol.AppendPolicyResponse(nil, &protocol.PolicyResponse{Version: v, Policy: enc})
			}
			select {
			case <-ch:
			case <-timer.C:
				return protocol.AppendPolicyResponse(nil, &protocol.PolicyResponse{Version: v})
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return nil, protocol.Errorf(protocol.StatusUnknownCommand, cmd.String())
}

func policyOf(t *testing.T, version uint64, names ...string) *auth.Policy {
	t.Helper()
	var es []auth.Entry
	for _, n := range names {
		h, err := auth.HashSecretAnyLength(n + "-secret")
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, auth.Entry{Name: n, Kind: auth.KindApp, Secret: h, Grants: auth.Grants{Publish: []string{n + ".*"}}})
	}
	p, err := auth.NewPolicy(version, es)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, what, cond)
}

func TestPolicyCache_FollowsPersistsAndRestartsFromItsFile(t *testing.T) {
	creds := auth.Credentials{Name: "rt1", Secret: "broker-secret-0123"}
	meta := newPolicyMeta(t, creds)
	meta.set(policyOf(t, 10, "billing"))
	path := filepath.Join(t.TempDir(), "data", "policy")

	c, err := NewPolicyCache([]string{"meta:1"}, path, WithPolicyCaller(meta), WithPolicyCredentials(creds), WithPolicyWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c.Authority().Version() != 0 {
		t.Fatal("a cache with no file must start empty")
	}
	c.Start()
	waitFor(t, "version 10", func() bool { return c.Authority().Version() == 10 })
	if _, err := c.Authority().Authenticate("billing", "billing-secret"); err != nil {
		t.Fatalf("authenticate with the fetched policy: %v", err)
	}
	meta.set(policyOf(t, 17, "billing", "shipping"))
	waitFor(t, "version 17", func() bool { return c.Authority().Version() == 17 })
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v, %v", fi, err)
	}
	st := c.Stats()
	if st.Updates != 2 || st.Version != 17 || st.PersistFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// The meta server goes away; a restarted broker starts from the file.
	meta.setDown(true)
	c2, err := NewPolicyCache([]string{"meta:1", "meta:2"}, path, WithPolicyCaller(meta), WithPolicyCredentials(creds),
		WithPolicyRetry(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if v := c2.Authority().Version(); v != 17 {
		t.Fatalf("restarted cache at version %d, want 17", v)
	}
	if _, err := c2.Authority().Authenticate("shipping", "shipping-secret"); err != nil {
		t.Fatalf("authenticate from the cache file: %v", err)
	}
	c2.Start()
	waitFor(t, "failures counted", func() bool { return c2.Stats().Failures >= 2 })
	if c2.Stats().LastError == nil || c2.Authority().Version() != 17 {
		t.Fatalf("during the outage: %+v", c2.Stats())
	}
	meta.setDown(false)
	meta.set(policyOf(t, 20, "billing"))
	waitFor(t, "version 20 after the outage", func() bool { return c2.Authority().Version() == 20 })
	if _, err := c2.Authority().Authenticate("shipping", "shipping-secret"); !errors.Is(err, auth.ErrUnknownIdentity) {
		t.Fatalf("a removed identity still authenticates: %v", err)
	}
}

func TestPolicyCache_IgnoresADamagedFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	p := policyOf(t, 5, "billing")
	b, _ := json.Marshal(p)
	if err := writePolicyFile(good, b); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), whole...)
	flipped[len(flipped)-3] ^= 1
	for name, content := range map[string][]byte{
		"torn":    whole[:len(whole)-5],
		"flipped": flipped,
		"empty":   nil,
		"foreign": []byte(`{"version":5,"identities":[]}`),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := NewPolicyCache([]string{"meta:1"}, path, WithPolicyCaller(newPolicyMeta(t, auth.Credentials{})))
		if err != nil {
			t.Fatal(err)
		}
		if v := c.Authority().Version(); v != 0 {
			t.Errorf("%s file loaded as version %d", name, v)
		}
		c.Close()
	}
	c, err := NewPolicyCache([]string{"meta:1"}, good, WithPolicyCaller(newPolicyMeta(t, auth.Credentials{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Authority().Version() != 5 {
		t.Fatal("the whole file was not loaded")
	}
}

func TestPolicyCache_LaggingMetaIsNotBelievedUntilLong(t *testing.T) {
	creds := auth.Credentials{Name: "rt1", Secret: "broker-secret-0123"}
	meta := newPolicyMeta(t, creds)
	meta.set(policyOf(t, 3, "rebuilt"))
	path := filepath.Join(t.TempDir(), "policy")
	b, _ := json.Marshal(policyOf(t, 100, "old"))
	if err := writePolicyFile(path, b); err != nil {
		t.Fatal(err)
	}
	c, err := NewPolicyCache([]string{"meta:1"}, path, WithPolicyCaller(meta), WithPolicyCredentials(creds),
		WithPolicyWait(20*time.Millisecond), WithPolicyRollbackAfter(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.Start()
	waitFor(t, "several polls", func() bool { return c.Stats().Polls >= 3 })
	if c.Authority().Version() != 100 && time.Since(start) < 300*time.Millisecond {
		t.Fatal("a lagging meta server's older policy was taken at once")
	}
	waitFor(t, "the older policy taken after the rollback window", func() bool { return c.Authority().Version() == 3 })
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("rolled back before the window")
	}
	if _, err := c.Authority().Authenticate("rebuilt", "rebuilt-secret"); err != nil {
		t.Fatal(err)
	}
	// Back to normal: only newer versions from now on.
	meta.set(policyOf(t, 4, "rebuilt", "next"))
	waitFor(t, "version 4", func() bool { return c.Authority().Version() == 4 })
}

func TestPolicyCache_WrongCredentialsCountAsFailures(t *testing.T) {
	meta := newPolicyMeta(t, auth.Credentials{Name: "rt1", Secret: "broker-secret-0123"})
	meta.set(policyOf(t, 3, "billing"))
	c, err := NewPolicyCache([]string{"meta:1"}, filepath.Join(t.TempDir(), "policy"), WithPolicyCaller(meta),
		WithPolicyCredentials(auth.Credentials{Name: "rt1", Secret: "wrong-secret-000000"}), WithPolicyRetry(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	waitFor(t, "failures", func() bool { return c.Stats().Failures >= 2 })
	if !errors.Is(c.Stats().LastError, protocol.ErrUnauthenticated) || c.Authority().Version() != 0 {
		t.Fatalf("stats %+v", c.Stats())
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not stop the loop")
	}
	if _, err := NewPolicyCache(nil, "x"); !errors.Is(err, ErrNoMetaServer) {
		t.Fatalf("no addresses: %v", err)
	}
}
