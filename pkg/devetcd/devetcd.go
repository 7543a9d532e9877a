package devetcd

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/fsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configure an embedded etcd. Zero fields take the defaults named.
type Options struct {
	// Dir holds the member's data (WAL and snapshots; about 80 MB apparent
	// size, mostly the preallocated WAL). Required.
	Dir string
	// Name is the member's name. Default "qmq-meta".
	Name string
	// ClientAddr is the host:port clients connect to. Default
	// "127.0.0.1:0" (a free port).
	ClientAddr string
	// PeerAddr is the host:port of the raft peer listener (nobody connects to
	// it in a single-node cluster). Default "127.0.0.1:0".
	PeerAddr string
	// ClientAdvertise is the host:port the member tells clients to use and
	// Endpoints returns (default ClientAddr). Required when ClientAddr
	// listens on all interfaces (0.0.0.0, [::]).
	ClientAdvertise string
	// PeerAdvertise is the peer address the member advertises (default
	// PeerAddr). Required when PeerAddr listens on all interfaces.
	PeerAdvertise string
	// Fast selects 10 ms ticks and a 100 ms election timeout instead of
	// etcd's 100 ms / 1 s, so the member is ready in about 0.1 s and leases
	// may be as short as 1 s. For tests. Default false.
	Fast bool
	// StartTimeout bounds the wait for the member to become ready. Default
	// 30 s.
	StartTimeout time.Duration
	// ClientTLS, when its CertFile is set, serves the client port over TLS
	// (https), and with ClientCertAuth only to clients whose certificate
	// TrustedCAFile signed (etcd's own client-certificate auth). Default
	// plaintext.
	ClientTLS TLS
	// PeerTLS, likewise for the raft peer port (members of a larger cluster
	// talk through it; a single node listens on it anyway).
	PeerTLS TLS
}

// TLS names the PEM files of an etcd listener. etcd reads the certificate
// and key files at every handshake, so replacing them takes effect without
// a restart.
type TLS struct {
	CertFile, KeyFile string
	// TrustedCAFile verifies client (or peer) certificates.
	TrustedCAFile string
	// ClientCertAuth refuses connections without a certificate
	// TrustedCAFile signed.
	ClientCertAuth bool
}

// On reports whether the listener runs TLS.
func (t TLS) On() bool { return t.CertFile != "" }

func (t TLS) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile, ClientCertAuth: t.ClientCertAuth}
}

func (t TLS) validate(name string) error {
	switch {
	case !t.On() && (t.KeyFile != "" || t.TrustedCAFile != "" || t.ClientCertAuth):
		return fmt.Errorf("devetcd: Options.%s: a key, CA or client-certificate auth without a certificate", name)
	case t.On() && t.KeyFile == "":
		return fmt.Errorf("devetcd: Options.%s: a certificate without its key", name)
	case t.ClientCertAuth && t.TrustedCAFile == "":
		return fmt.Errorf("devetcd: Options.%s: client-certificate auth needs TrustedCAFile", name)
	}
	return nil
}

// ErrNotReady: the member did not become ready within Options.StartTimeout.
var ErrNotReady = errors.New("devetcd: etcd not ready")

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	if o.Dir == "" {
		return errors.New("devetcd: Options.Dir is required")
	}
	for name, a := range map[string]string{"ClientAddr": o.ClientAddr, "PeerAddr": o.PeerAddr} {
		if a == "" {
			continue
		}
		if _, err := url.Parse("http://" + a); err != nil {
			return fmt.Errorf("devetcd: Options.%s %q: %w", name, a, err)
		}
	}
	if err := exposure.CheckAdvertise(o.ClientAddr, o.ClientAdvertise, "ClientAdvertise"); o.ClientAddr != "" && err != nil {
		return fmt.Errorf("devetcd: %w", err)
	}
	if err := exposure.CheckAdvertise(o.PeerAddr, o.PeerAdvertise, "PeerAdvertise"); o.PeerAddr != "" && err != nil {
		return fmt.Errorf("devetcd: %w", err)
	}
	if err := o.ClientTLS.validate("ClientTLS"); err != nil {
		return err
	}
	return o.PeerTLS.validate("PeerTLS")
}

// Etcd is a running embedded member.
type Etcd struct {
	e         *embed.Etcd
	level     zap.AtomicLevel
	endpoints []string
	closeOnce sync.Once
}

// Start starts a single-node etcd and waits until it serves clients. lg
// receives etcd's logs (raised to warnings: etcd is chatty at info); nil
// discards them.
func Start(o Options, lg *zap.Logger) (*Etcd, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	if err := fsutil.MkdirPrivate(fsutil.OS, o.Dir); err != nil {
		return nil, fmt.Errorf("devetcd: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = o.Dir
	cfg.Name = def(o.Name, "qmq-meta")
	scheme := func(t TLS) string {
		if t.On() {
			return "https"
		}
		return "http"
	}
	cu := url.URL{Scheme: scheme(o.ClientTLS), Host: def(o.ClientAddr, "127.0.0.1:0")}
	pu := url.URL{Scheme: scheme(o.PeerTLS), Host: def(o.PeerAddr, "127.0.0.1:0")}
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = o.ClientTLS.info(), o.PeerTLS.info()
	acu, apu := cu, pu
	if o.ClientAdvertise != "" {
		acu.Host = o.ClientAdvertise
	}
	if o.PeerAdvertise != "" {
		apu.Host = o.PeerAdvertise
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{acu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{apu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if o.Fast {
		cfg.TickMs, cfg.ElectionMs = 10, 100
	}
	// Warnings and errors only; Close raises the level further, because
	// etcd logs its own orderly shutdown ("http: Server closed", "use of
	// closed network connection") as errors.
	level := zap.NewAtomicLevelAt(zap.WarnLevel)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.Named("etcd").WithOptions(zap.IncreaseLevel(level)))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("devetcd: start: %w", err)
	}
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("devetcd: start: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("%w after %v", ErrNotReady, timeout)
	}
	endpoint := e.Clients[0].Addr().String()
	if o.ClientAdvertise != "" {
		endpoint = o.ClientAdvertise
	}
	return &Etcd{e: e, level: level, endpoints: []string{endpoint}}, nil
}

// Endpoints returns the client addresses, host:port, for clientv3.Config.
func (d *Etcd) Endpoints() []string { return append([]string(nil), d.endpoints...) }

// Close stops the member. It may be called more than once.
func (d *Etcd) Close() {
	d.closeOnce.Do(func() {
		d.level.SetLevel(zap.FatalLevel)
		d.e.Close()
	})
}
