package main

// The tls suite: what TLS and permission checks cost, on the workloads of
// the produce, consume and sync suites, ours against ours. Two brokers run
// side by side for each pair — one plaintext, one with TLS on its TCP port
// (--tls-cert, --tls-key: crypto/tls, TLS 1.3, ECDSA P-256 certificates
// from a CA made for the run) — and the same worker takes turns against
// them (tlsRounds rounds each), so both see the same load on the shared
// machine; each figure is the total over the rounds. The TLS clients verify
// the broker against the CA; neither side authenticates the client, so
// the figure is the price of encryption alone.
//
//	produce_tls_vs_plain_ratio   the produce worker (16 × 256 messages in
//	                             flight, durable flush), TLS / plain
//	consume_tls_vs_plain_ratio   the consume worker (pulls of 256, range
//	                             acks) draining a backlog, TLS / plain
//	sync_tls_vs_plain_ratio      the sync worker (one Send at a time,
//	                             --flush async), TLS / plain
//	produce_auth_vs_open_ratio   the produce worker, plaintext, against a
//	                             broker with --auth checking the identity's
//	                             publish grant on every message (its policy
//	                             from a meta server) / the same broker setup
//	                             without --auth
//	partial_frame_memory_mb      the netlimits suite's figure (1,000
//	                             connections each sending a 16 MiB frame's
//	                             header and 1 MiB of it)

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/pki"
)

const (
	tlsRounds       = 3
	tlsProduceRound = 4 * time.Second
	tlsConsumeEach  = 500_000 // messages a consume round drains
)

func init() { register("tls", runTLS) }

// benchCerts are the files of the run's CA and the brokers' certificate.
type benchCerts struct{ ca, cert, key string }

func makeBenchCerts(dir string) (benchCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return benchCerts{}, err
	}
	ca, err := pki.NewCA("qmqbench CA", 0)
	if err != nil {
		return benchCerts{}, err
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true,
		Identity: auth.IdentityURI(auth.KindBroker, "bench")})
	if err != nil {
		return benchCerts{}, err
	}
	c := benchCerts{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "broker.pem"), key: filepath.Join(dir, "broker-key.pem")}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{c.ca, ca.CertPEM, 0o644}, {c.cert, certPEM, 0o644}, {c.key, keyPEM, 0o600}} {
		if err := pki.WriteFile(f.path, f.data, f.mode); err != nil {
			return benchCerts{}, err
		}
	}
	return c, nil
}

func (c benchCerts) brokerArgs() []string {
	return []string{"--tls-ca", c.ca, "--tls-cert", c.cert, "--tls-key", c.key}
}

// startRealtimeTLS is startRealtime for a broker serving TLS (its HTTP
// port too).
func (e *Env) startRealtimeTLS(dir string, c benchCerts, extra ...string) (*process, string, error) {
	cfg, err := tlsconfig.Client(tlsconfig.Files{CA: c.ca}, "127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	addr, httpAddr := freeAddr(), freeAddr()
	args := append([]string{"--addr", addr, "--http-addr", httpAddr, "--data-dir", dir, "--log-level", "warn"}, c.brokerArgs()...)
	p, err := startProcess("qmq-realtime (tls)", filepath.Join(e.Bin, "qmq-realtime"), append(args, extra...)...)
	if err != nil {
		return nil, "", err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	if err := p.waitHTTPWith(hc, "https://"+httpAddr+"/readyz", 60*time.Second); err != nil {
		p.kill()
		return nil, "", err
	}
	return p, addr, nil
}

// sides runs round(side) for side "plain" then "tls", tlsRounds times,
// and returns each side's total rate.
func (e *Env) sides(what string, round func(side string) (rateResult, error)) (plain, secure float64, err error) {
	var n [2]int64
	var t [2]time.Duration
	for r := range tlsRounds {
		for i, side := range []string{"plain", "tls"} {
			res, err := round(side)
			if err != nil {
				return 0, 0, fmt.Errorf("%s %s round %d: %w", what, side, r, err)
			}
			if res.Failed > 0 {
				return 0, 0, fmt.Errorf("%s %s round %d: %d sends failed", what, side, r, res.Failed)
			}
			n[i] += res.Messages
			t[i] += res.Elapsed
		}
		e.Logf("%s round %d: plain %.0f msg/s, tls %.0f msg/s", what, r, float64(n[0])/t[0].Seconds(), float64(n[1])/t[1].Seconds())
	}
	return float64(n[0]) / t[0].Seconds(), float64(n[1]) / t[1].Seconds(), nil
}

func runTLS(env *Env) error {
	certs, err := makeBenchCerts(filepath.Join(env.Dir, "tls-certs"))
	if err != nil {
		return err
	}
	if err := env.tlsProduce(certs); err != nil {
		return err
	}
	if err := env.tlsConsume(certs); err != nil {
		return err
	}
	if err := env.tlsSync(certs); err != nil {
		return err
	}
	if err := env.authProduce(); err != nil {
		return err
	}
	return runNetLimits(env)
}

// pair starts a plaintext and a TLS broker with the same extra flags.
func (e *Env) pair(name string, c benchCerts, extra ...string) (addrs map[string]string, stop func(), err error) {
	plain, pAddr, err := e.startRealtime(filepath.Join(e.Dir, name+"-plain"), extra...)
	if err != nil {
		return nil, nil, err
	}
	secure, tAddr, err := e.startRealtimeTLS(filepath.Join(e.Dir, name+"-tls"), c, extra...)
	if err != nil {
		plain.stop()
		return nil, nil, err
	}
	return map[string]string{"plain": pAddr, "tls": tAddr}, func() { secure.stop(); plain.stop() }, nil
}

// clientArgs are a worker's flags for side.
func (c benchCerts) clientArgs(side string) []string {
	if side == "tls" {
		return []string{"-tls-ca", c.ca}
	}
	return nil
}

func (e *Env) tlsProduce(c benchCerts) error {
	addrs, stop, err := e.pair("produce", c)
	if err != nil {
		return err
	}
	defer stop()
	plain, secure, err := e.sides("produce", func(side string) (rateResult, error) {
		var res rateResult
		err := runWorker("produce", &res, append([]string{"-addr", addrs[side], "-duration", tlsProduceRound.String()}, c.clientArgs(side)...)...)
		return res, err
	})
	if err != nil {
		return err
	}
	e.Metric("produce_plain_msgs_per_s", plain, "msg/s")
	e.Metric("produce_tls_msgs_per_s", secure, "msg/s")
	e.Metric("produce_tls_vs_plain_ratio", secure/plain, "x")
	return nil
}

func (e *Env) tlsConsume(c benchCerts) error {
	addrs, stop, err := e.pair("consume", c)
	if err != nil {
		return err
	}
	defer stop()
	for side, addr := range addrs {
		var fill rateResult
		if err := runWorker("produce", &fill, append([]string{"-addr", addr, "-count", fmt.Sprint(tlsRounds * tlsConsumeEach),
			"-subjects", fmt.Sprint(tlsRounds), "-subject", "bench.c"}, c.clientArgs(side)...)...); err != nil {
			return err
		}
	}
	round := map[string]int{}
	plain, secure, err := e.sides("consume", func(side string) (rateResult, error) {
		var res rateResult
		subject := fmt.Sprintf("bench.c%d", round[side])
		round[side]++
		err := runWorker("consume", &res, append([]string{"-addr", addrs[side], "-subject", subject,
			"-count", fmt.Sprint(tlsConsumeEach)}, c.clientArgs(side)...)...)
		return res, err
	})
	if err != nil {
		return err
	}
	e.Metric("consume_plain_msgs_per_s", plain, "msg/s")
	e.Metric("consume_tls_msgs_per_s", secure, "msg/s")
	e.Metric("consume_tls_vs_plain_ratio", secure/plain, "x")
	return nil
}

func (e *Env) tlsSync(c benchCerts) error {
	addrs, stop, err := e.pair("sync", c, "--flush", "async")
	if err != nil {
		return err
	}
	defer stop()
	plain, secure, err := e.sides("sync", func(side string) (rateResult, error) {
		var res rateResult
		err := runWorker("sync", &res, append([]string{"-addr", addrs[side], "-duration", syncRound.String()}, c.clientArgs(side)...)...)
		return res, err
	})
	if err != nil {
		return err
	}
	e.Metric("sync_plain_msgs_per_s", plain, "msg/s")
	e.Metric("sync_tls_msgs_per_s", secure, "msg/s")
	e.Metric("sync_tls_vs_plain_ratio", secure/plain, "x")
	return nil
}

// authProduce: two plaintext brokers registered with one meta server, one
// with --auth; the worker authenticates to it as an app identity that may
// publish bench.* (every message's subject is checked against the grant).
func (e *Env) authProduce() error {
	addrs, stopMeta, err := startMetaServer(filepath.Join(e.Dir, "auth-meta"), metaFakesEnv+"=0")
	if err != nil {
		return err
	}
	defer stopMeta()
	tcp, httpAddr, _ := strings.Cut(addrs, " ")
	secret, err := auth.GenerateSecret()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := api.NewClient(httpAddr, "bench", 10*time.Second).CreateIdentity(ctx, api.IdentityRequest{
		Name: "bench-app", Kind: "app", Secret: secret, Grants: api.Grants{Publish: []string{"bench.*"}}}); err != nil {
		return fmt.Errorf("create the bench identity: %w", err)
	}
	creds := filepath.Join(e.Dir, "auth-meta", "bench-app.credentials")
	if err := os.WriteFile(creds, []byte("bench-app:"+secret+"\n"), 0o600); err != nil {
		return err
	}
	// The --auth broker fetches the policy as a broker of its group.
	brokerSecret, err := auth.GenerateSecret()
	if err != nil {
		return err
	}
	if _, err := api.NewClient(httpAddr, "bench", 10*time.Second).CreateIdentity(ctx, api.IdentityRequest{
		Name: "auth", Kind: "broker", Group: "auth", Secret: brokerSecret}); err != nil {
		return fmt.Errorf("create the broker identity: %w", err)
	}
	brokerCreds := filepath.Join(e.Dir, "auth-meta", "broker.credentials")
	if err := os.WriteFile(brokerCreds, []byte("auth:"+brokerSecret+"\n"), 0o600); err != nil {
		return err
	}
	open, oAddr, err := e.startRealtime(filepath.Join(e.Dir, "auth-open"), "--group", "open", "--meta", tcp)
	if err != nil {
		return err
	}
	defer open.stop()
	closed, cAddr, err := e.startRealtime(filepath.Join(e.Dir, "auth-on"), "--group", "auth", "--meta", tcp, "--auth", "--credentials-file", brokerCreds)
	if err != nil {
		return err
	}
	defer closed.stop()
	// The policy reaches the broker through its cache: wait until the
	// identity can send.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var res rateResult
		err := runWorker("produce", &res, "-addr", cAddr, "-count", "1", "-credentials-file", creds)
		if err == nil && res.Failed == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the --auth broker never took the bench identity: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sides := map[string][]string{"plain": {"-addr", oAddr}, "tls": {"-addr", cAddr, "-credentials-file", creds}}
	openRate, authRate, err := e.sides("auth", func(side string) (rateResult, error) {
		var res rateResult
		err := runWorker("produce", &res, append(sides[side], "-duration", tlsProduceRound.String())...)
		return res, err
	})
	if err != nil {
		return err
	}
	e.Metric("produce_open_msgs_per_s", openRate, "msg/s")
	e.Metric("produce_auth_msgs_per_s", authRate, "msg/s")
	e.Metric("produce_auth_vs_open_ratio", authRate/openRate, "x")
	return nil
}
