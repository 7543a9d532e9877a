package realtime_test

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

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/realtime"
)

// TestSecure_RealtimeTLS runs a master and its slave with TLS on every
// listener and --auth, identities from client certificates only (no meta
// server: the certificate's kind carries the rights). The slave proves its
// group to its master with its certificate and copies everything; a client
// trusting another CA, one presenting an expired certificate and a
// plaintext client fail cleanly (an error, the handshake failure counted),
// a TLS client without an identity is refused unauthenticated, a broker
// certificate of another group may not copy, and the master keeps serving
// throughout.
func TestSecure_RealtimeTLS(t *testing.T) {
	const group = "tlsg"
	ca := testutil.NewCA(t)
	node := func(name, group string) tlsconfig.Files {
		c := ca.Issue(t, testutil.CertOptions{Name: name, Hosts: []string{"127.0.0.1"}, Both: true, URIs: []string{"qmq://broker/" + group}})
		return tlsconfig.Files{CA: ca.CAFile, Cert: c.CertFile, Key: c.KeyFile}
	}
	secured := func(files tlsconfig.Files) func(*realtime.Options) {
		return func(o *realtime.Options) {
			o.Group, o.HTTPAddr = group, "127.0.0.1:0"
			o.Secure.TLS, o.Secure.RequireAuth = files, true
		}
	}
	m := startBroker(t, t.TempDir(), replOptions, secured(node("master", group)))
	s := startSlave(t, t.TempDir(), m.addr(), secured(node("slave", group)))

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
	// A broker certificate of the group may publish (a delay server forwards
	// any subject).
	peerCert := ca.Issue(t, testutil.CertOptions{Name: "peer", Client: true, URIs: []string{"qmq://broker/" + group}})
	good := client(ca.ClientConfig(&peerCert))
	send := func(prefix string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := rawSend(ctx, good, m.addr(), "secure.orders", fmt.Sprintf("%s-%d", prefix, i))
			cancel()
			if err != nil {
				t.Fatalf("send over TLS: %v", err)
			}
		}
	}
	copied := func() {
		t.Helper()
		waitCaughtUp(t, m, 30*time.Second)
		testutil.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if ms, ss := m.Replication(), s.Replication(); ss.MessageEnd != ms.MessageEnd {
				return fmt.Errorf("the slave holds %d of the master's %d bytes", ss.MessageEnd, ms.MessageEnd)
			}
			return nil
		})
	}
	send("before", 20)
	copied()

	// Handshakes that must fail, each cleanly: an error, not a hang.
	otherCA := testutil.NewCA(t)
	expired := ca.Issue(t, testutil.CertOptions{Name: "expired", Client: true, URIs: []string{"qmq://admin/ops"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	stats := protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{})
	failuresBefore := tlsHandshakeFailures(t, ca, m)
	for _, c := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"a client trusting another CA", otherCA.ClientConfig(nil)},
		{"an expired admin certificate", ca.ClientConfig(&expired)},
		{"a certificate of another CA", func() *tls.Config {
			cert := otherCA.Issue(t, testutil.CertOptions{Name: "stranger", Client: true, URIs: []string{"qmq://admin/ops"}})
			cfg := ca.ClientConfig(nil)
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
			return cfg
		}()},
		{"a plaintext client", nil},
	} {
		start := time.Now()
		_, err := client(c.cfg).Call(context.Background(), m.addr(), protocol.CmdBrokerStats, stats)
		if err == nil {
			t.Errorf("%s was served", c.name)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s failed after %v", c.name, d)
		}
	}
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := tlsHandshakeFailures(t, ca, m); n < failuresBefore+3 {
			return fmt.Errorf("%v handshake failures counted, want %v more", n, failuresBefore+3)
		}
		return nil
	})

	// TLS without an identity, and a broker of another group.
	if _, err := client(ca.ClientConfig(nil)).Call(context.Background(), m.addr(), protocol.CmdBrokerStats, stats); !isStatusErr(err, protocol.StatusUnauthenticated) {
		t.Errorf("TLS without a client certificate: %v, want unauthenticated", err)
	}
	otherCert := ca.Issue(t, testutil.CertOptions{Name: "other", Client: true, URIs: []string{"qmq://broker/elsewhere"}})
	sync := protocol.AppendSyncRequest(nil, &protocol.SyncRequest{Group: group, MessageSegmentSize: replSegment, ActionSegmentSize: replSegment,
		MaxBytes: 1 << 20, SlaveID: "intruder"})
	if _, err := client(ca.ClientConfig(&otherCert)).Call(context.Background(), m.addr(), protocol.CmdSyncLog, sync); !isStatusErr(err, protocol.StatusForbidden) {
		t.Errorf("sync by a broker certificate of another group: %v, want forbidden", err)
	}
	// An admin certificate reads stats.
	adminCert := ca.Issue(t, testutil.CertOptions{Name: "admin", Client: true, URIs: []string{"qmq://admin/ops"}})
	if _, err := client(ca.ClientConfig(&adminCert)).Call(context.Background(), m.addr(), protocol.CmdBrokerStats, stats); err != nil {
		t.Errorf("stats with an admin certificate: %v", err)
	}

	// The master kept serving, and its slave copying.
	send("after", 20)
	copied()
}

func isStatusErr(err error, st protocol.Status) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Status == st
}

// tlsHandshakeFailures reads qmq_realtime_tls_handshake_failures_total from
// the broker's ops port (TLS too; /metrics is open).
func tlsHandshakeFailures(t *testing.T, ca *testutil.CA, b *testBroker) float64 {
	t.Helper()
	hc := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(nil)}}
	resp, err := hc.Get("https://" + b.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "qmq_realtime_tls_handshake_failures_total ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, "qmq_realtime_tls_handshake_failures_total "), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no qmq_realtime_tls_handshake_failures_total in /metrics")
	return 0
}
