package delay_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/transport"
)

// TestSecure_DelayTLS runs a delay master and its slave with TLS on every
// listener and --auth, identities from client certificates only (no meta
// server). The slave proves its group with its certificate and copies
// every message; a client trusting another CA, one presenting an expired
// certificate or one of another CA, and a plaintext client fail cleanly
// (an error, the handshake failure counted); a TLS client without an
// identity is refused unauthenticated and a broker of another group may
// not copy; the master keeps serving throughout.
func TestSecure_DelayTLS(t *testing.T) {
	t.Parallel()
	const group = "dtls"
	ca := testutil.NewCA(t)
	options := func(name string, role string, master string) delay.Options {
		c := ca.Issue(t, testutil.CertOptions{Name: name, Hosts: []string{"127.0.0.1"}, Both: true, URIs: []string{"qmq://broker/" + group}})
		o := delay.NewOptions()
		// Nothing becomes due during the test: the realtime address is never dialled.
		o.Group, o.Addr, o.HTTPAddr, o.DataDir, o.Realtime = group, "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), []string{"127.0.0.1:1"}
		o.Role, o.Master, o.SyncWait = role, master, 200*time.Millisecond
		o.Secure.TLS, o.Secure.RequireAuth = tlsconfig.Files{CA: ca.CAFile, Cert: c.CertFile, Key: c.KeyFile}, true
		return o
	}
	m := startDelayWith(t, options("master", delay.RoleMaster, ""))
	sl := startDelayWith(t, options("slave", delay.RoleSlave, m.Addr().String()))

	client := func(cfg *tls.Config) *transport.Client {
		o := fastTransport
		o.TLS = cfg
		tc, err := transport.New(o, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tc.Close() })
		return tc
	}
	// A broker certificate of the group may publish any subject.
	peer := ca.Issue(t, testutil.CertOptions{Name: "peer", Client: true, URIs: []string{"qmq://broker/" + group}})
	good := client(ca.ClientConfig(&peer))
	sent := 0
	send := func(prefix string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			body := delaySendBody(t, "secure.later", fmt.Sprintf("%s-%d", prefix, i))
			resp, err := good.Call(context.Background(), m.Addr().String(), protocol.CmdSend, body)
			if err != nil {
				t.Fatalf("send over TLS: %v", err)
			}
			if st, err := protocol.DecodeSendResponse(resp); err != nil || len(st) != 1 || st[0] != protocol.StatusOK {
				t.Fatalf("send over TLS: %v %v", st, err)
			}
		}
		sent += n
		testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			if n := sl.Stats().Pending; n != int64(sent) {
				return fmt.Errorf("the slave holds %d pending, want %d", n, sent)
			}
			return nil
		})
	}
	send("before", 20)

	otherCA := testutil.NewCA(t)
	expired := ca.Issue(t, testutil.CertOptions{Name: "expired", Client: true, URIs: []string{"qmq://broker/" + group},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	stranger := otherCA.Issue(t, testutil.CertOptions{Name: "stranger", Client: true, URIs: []string{"qmq://broker/" + group}})
	presenting := func(cert tls.Certificate) *tls.Config {
		cfg := ca.ClientConfig(nil)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		return cfg
	}
	manifest := protocol.AppendDelayManifestRequest(nil, &protocol.DelayManifestRequest{Group: group, SlaveID: "intruder"})
	failures := func() float64 { return delayHandshakeFailures(t, ca, m) }
	before := failures()
	for _, c := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"a client trusting another CA", otherCA.ClientConfig(nil)},
		{"an expired certificate", presenting(expired.TLS)},
		{"a certificate of another CA", presenting(stranger.TLS)},
		{"a plaintext client", nil},
	} {
		start := time.Now()
		if _, err := client(c.cfg).Call(context.Background(), m.Addr().String(), protocol.CmdDelaySyncManifest, manifest); err == nil {
			t.Errorf("%s was served", c.name)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s failed after %v", c.name, d)
		}
	}
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := failures(); n < before+3 {
			return fmt.Errorf("%v handshake failures counted, want %v more", n, before+3)
		}
		return nil
	})
	var pe *protocol.Error
	if _, err := client(ca.ClientConfig(nil)).Call(context.Background(), m.Addr().String(), protocol.CmdDelaySyncManifest, manifest); !errors.As(err, &pe) || pe.Status != protocol.StatusUnauthenticated {
		t.Errorf("TLS without a client certificate: %v, want unauthenticated", err)
	}
	other := ca.Issue(t, testutil.CertOptions{Name: "other", Client: true, URIs: []string{"qmq://broker/elsewhere"}})
	if _, err := client(ca.ClientConfig(&other)).Call(context.Background(), m.Addr().String(), protocol.CmdDelaySyncManifest, manifest); !errors.As(err, &pe) || pe.Status != protocol.StatusForbidden {
		t.Errorf("a broker certificate of another group copying: %v, want forbidden", err)
	}

	// The master kept serving, and its slave copying.
	send("after", 20)
	if r := sl.Replication(); r.Role != delay.RoleSlave {
		t.Fatalf("slave %+v", r)
	}
}

// delayHandshakeFailures reads qmq_delay_tls_handshake_failures_total from
// the server's ops port (TLS too; /metrics is open).
func delayHandshakeFailures(t *testing.T, ca *testutil.CA, s *delay.Server) float64 {
	t.Helper()
	hc := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(nil)}}
	resp, err := hc.Get("https://" + s.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	const name = "qmq_delay_tls_handshake_failures_total "
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name) {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, name), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %sin /metrics", name)
	return 0
}
