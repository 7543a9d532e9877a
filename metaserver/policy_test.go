package metaserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestPolicy_DistributedToBrokers runs a broker's policy cache against a
// meta server: it receives the policy, each change as soon as it is made
// (long poll), persists it, and after the meta server is gone a restarted
// cache still authenticates from its file.
func TestPolicy_DistributedToBrokers(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	ctx := context.Background()
	root := admin(s, testToken)
	brokerCreds, err := auth.ParseCredentials(addIdentity(t, s, api.IdentityRequest{Name: "rt1", Kind: "broker"}))
	if err != nil {
		t.Fatal(err)
	}
	billing := addIdentity(t, s, api.IdentityRequest{Name: "billing", Kind: "app", Grants: api.Grants{Publish: []string{"orders"}}})
	billingCreds, _ := auth.ParseCredentials(billing)

	path := filepath.Join(t.TempDir(), "rt1", "policy")
	c, err := metaclient.NewPolicyCache([]string{s.Addr().String()}, path, metaclient.WithPolicyCredentials(brokerCreds))
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	eventually(t, 5*time.Second, "the broker's policy at the server's version", func() bool {
		return c.Authority().Version() == s.Authority().Version()
	})
	p, err := c.Authority().Authenticate(billingCreds.Name, billingCreds.Secret)
	if err != nil || !p.CanPublish("orders") || p.CanPublish("payments") {
		t.Fatalf("billing on the broker: %v", err)
	}

	// Changes arrive while the poll is held (its wait is 30 s).
	shipping := addIdentity(t, s, api.IdentityRequest{Name: "shipping", Kind: "app"})
	shippingCreds, _ := auth.ParseCredentials(shipping)
	start := time.Now()
	eventually(t, 5*time.Second, "the new identity on the broker", func() bool {
		_, err := c.Authority().Authenticate(shippingCreds.Name, shippingCreds.Secret)
		return err == nil
	})
	if _, err := root.SetIdentityEnabled(ctx, "billing", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "billing disabled on the broker", func() bool {
		_, err := c.Authority().Authenticate(billingCreds.Name, billingCreds.Secret)
		return errors.Is(err, auth.ErrDisabled)
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("changes took %v to arrive", took)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("policy cache file: %v %v", fi, err)
	}
	version := c.Authority().Version()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// The meta server goes away; the broker restarts from its file.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2, err := metaclient.NewPolicyCache([]string{s.Addr().String()}, path, metaclient.WithPolicyCredentials(brokerCreds),
		metaclient.WithPolicyRetry(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Start()
	if c2.Authority().Version() != version {
		t.Fatalf("restarted at version %d, want %d", c2.Authority().Version(), version)
	}
	if _, err := c2.Authority().Authenticate(shippingCreds.Name, shippingCreds.Secret); err != nil {
		t.Fatalf("shipping after a restart during the meta outage: %v", err)
	}
	if _, err := c2.Authority().Authenticate(billingCreds.Name, billingCreds.Secret); !errors.Is(err, auth.ErrDisabled) {
		t.Fatalf("billing after the restart: %v", err)
	}
	eventually(t, 5*time.Second, "failures counted", func() bool { return c2.Stats().Failures >= 2 })
}

// TestPolicy_LongPollAnswersWhenTheWaitEnds: a request naming the current
// version is held for its wait and answered without a policy.
func TestPolicy_LongPollAnswersWhenTheWaitEnds(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	c.auth(s, "admin:"+testToken)
	v := s.Authority().Version()
	start := time.Now()
	body, err := c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdPolicy,
		protocol.AppendPolicyRequest(nil, &protocol.PolicyRequest{Version: v, Wait: 300 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	pr, err := protocol.DecodePolicyResponse(body)
	if err != nil || pr.Version != v || len(pr.Policy) != 0 {
		t.Fatalf("answer %+v %v", pr, err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 3*time.Second {
		t.Fatalf("held for %v, want about 300ms", took)
	}
}
