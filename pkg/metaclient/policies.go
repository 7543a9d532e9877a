package metaclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// PolicyCache keeps a broker's copy of the policy (every identity, its
// grants and hashed secret) current, so the broker authenticates and
// authorizes its own clients without asking anyone per connection, and
// keeps doing so while every meta server is down.
//
// It long-polls the meta servers with protocol.CmdPolicy, naming the
// version it has; a meta server answers as soon as it has a newer policy.
// Each new policy is installed in the Authority (one atomic pointer swap)
// and written to the cache file, which NewPolicyCache reads back, so a
// broker that restarts during a meta outage starts with the last policy it
// had. A meta server that answers with an older version than the cache's
// is lagging and is not believed, unless every answer has been older for
// WithPolicyRollbackAfter (an etcd rebuilt from scratch starts its
// revisions again): then the next policy is taken whatever its version.
//
// Cache file (mode 0600: it holds secret hashes), written temp → fsync →
// rename:
//
//	0        4          8
//	+--------+----------+---------------------------+
//	| "QMQP" |  crc32c  |  policy JSON (auth.Policy)  |
//	+--------+----------+---------------------------+
//
// crc32c (Castagnoli, big-endian) covers the JSON. A file that is torn,
// fails its checksum or does not parse is ignored (logged): the cache
// starts empty and waits for a meta server.
type PolicyCache struct {
	addrs     []string
	path      string
	cfg       policyConfig
	authority *auth.Authority
	own       *transport.Client // closed by Close when we made it

	ctx       context.Context // cancelled by Close: ends pollLoop and its request
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	closeOnce sync.Once

	preferred   int       // pollLoop: index of the meta server to ask next
	behindSince time.Time // pollLoop: since when every answer has been older than ours
	takeAny     bool      // pollLoop: take the next policy whatever its version

	polls, updates, failures, persistFailures atomic.Uint64
	mu                                        sync.Mutex
	lastErr                                   error
	lastSuccess                               time.Time
}

// PolicyStats are a PolicyCache's counters, for a broker's metrics.
type PolicyStats struct {
	Version         uint64    // the installed policy's version (0: none)
	Polls           uint64    // requests answered by a meta server
	Updates         uint64    // policies installed
	Failures        uint64    // requests that failed (unreachable, refused, undecodable)
	PersistFailures uint64    // policies installed but not written to the cache file
	LastError       error     // the last failure (nil after a success)
	LastSuccess     time.Time // when a meta server last answered
}

// Defaults of a PolicyCache.
const (
	DefaultPolicyWait          = 30 * time.Second
	DefaultPolicyRetry         = time.Second
	DefaultPolicyMaxRetry      = 30 * time.Second
	DefaultPolicyRollbackAfter = 10 * time.Minute
)

type policyConfig struct {
	caller        Caller
	lg            *zap.Logger
	creds         auth.Credentials
	tls           *tls.Config
	wait          time.Duration
	retry         time.Duration
	rollbackAfter time.Duration
}

// PolicyOption configures a PolicyCache.
type PolicyOption func(*policyConfig)

// WithPolicyCaller sends requests through c instead of a transport of the
// cache's own (which Close then does not close).
func WithPolicyCaller(c Caller) PolicyOption { return func(o *policyConfig) { o.caller = c } }

// WithPolicyLogger logs through lg (default: nothing).
func WithPolicyLogger(lg *zap.Logger) PolicyOption { return func(o *policyConfig) { o.lg = lg } }

// WithPolicyCredentials authenticates as c (a broker or admin identity:
// only they may fetch the policy): the cache's own transport authenticates
// every connection with them; through WithPolicyCaller, protocol.CmdAuth
// goes before each request on whatever connection the caller uses. Leave
// it out when that caller authenticates its connections itself.
func WithPolicyCredentials(c auth.Credentials) PolicyOption {
	return func(o *policyConfig) { o.creds = c }
}

// WithPolicyTLS makes the cache's own transport talk TLS with cfg (not
// used with WithPolicyCaller).
func WithPolicyTLS(cfg *tls.Config) PolicyOption { return func(o *policyConfig) { o.tls = cfg } }

// WithPolicyWait sets how long a meta server may hold a request before
// answering that nothing changed (default 30 s; the meta server caps it).
func WithPolicyWait(d time.Duration) PolicyOption { return func(o *policyConfig) { o.wait = d } }

// WithPolicyRetry sets the first pause after a failed request (default
// 1 s); it doubles with each failure in a row, up to 30 s.
func WithPolicyRetry(d time.Duration) PolicyOption { return func(o *policyConfig) { o.retry = d } }

// WithPolicyRollbackAfter sets how long every meta server must answer with
// an older version before the cache takes their policy anyway (default
// 10 minutes).
func WithPolicyRollbackAfter(d time.Duration) PolicyOption {
	return func(o *policyConfig) { o.rollbackAfter = d }
}

// NewPolicyCache returns a cache of the policy of the meta servers at addrs
// (host:port), kept in the file at path (in the broker's data directory).
// It loads that file when it exists; it asks no meta server until Start.
func NewPolicyCache(addrs []string, path string, opts ...PolicyOption) (*PolicyCache, error) {
	if len(addrs) == 0 {
		return nil, ErrNoMetaServer
	}
	if path == "" {
		return nil, errors.New("metaclient: policy cache needs a file path")
	}
	cfg := policyConfig{lg: zap.NewNop(), wait: DefaultPolicyWait, retry: DefaultPolicyRetry, rollbackAfter: DefaultPolicyRollbackAfter}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.lg == nil {
		cfg.lg = zap.NewNop()
	}
	c := &PolicyCache{addrs: append([]string(nil), addrs...), path: path, cfg: cfg, authority: auth.NewAuthority(nil)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if p, err := readPolicyFile(path); err == nil {
		c.authority.Update(p)
		cfg.lg.Info("policy loaded from the cache file", zap.String("file", path), zap.Uint64("version", p.Version()), zap.Int("identities", p.Len()))
	} else if !errors.Is(err, fs.ErrNotExist) {
		cfg.lg.Warn("ignoring the policy cache file; waiting for a meta server", zap.String("file", path), zap.Error(err))
	}
	if c.cfg.caller == nil {
		to := transport.Options{RequestTimeout: cfg.wait + DefaultRequestTimeout, TLS: cfg.tls}
		if cfg.creds != (auth.Credentials{}) {
			creds := cfg.creds
			to.Credentials = &creds
		}
		tr, err := transport.New(to, cfg.lg.Named("transport"))
		if err != nil {
			return nil, err
		}
		c.own, c.cfg.caller = tr, tr
	}
	return c, nil
}

// Authority returns the authority the cache keeps current: what a broker
// authenticates and authorizes its clients with.
func (c *PolicyCache) Authority() *auth.Authority { return c.authority }

// Start starts polling the meta servers (once; later calls do nothing).
func (c *PolicyCache) Start() {
	c.startOnce.Do(func() {
		c.wg.Add(1)
		go c.pollLoop()
	})
}

// Close stops polling and waits for the poll loop to end. The Authority
// keeps the last policy.
func (c *PolicyCache) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		if c.own != nil {
			err = c.own.Close()
		}
	})
	return err
}

// Stats returns the cache's counters.
func (c *PolicyCache) Stats() PolicyStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return PolicyStats{Version: c.authority.Version(), Polls: c.polls.Load(), Updates: c.updates.Load(), Failures: c.failures.Load(),
		PersistFailures: c.persistFailures.Load(), LastError: c.lastErr, LastSuccess: c.lastSuccess}
}

// pollLoop asks the meta servers for newer policies until Close, moving to
// the next meta server after a failure and pausing (doubling up to
// DefaultPolicyMaxRetry) while they fail.
func (c *PolicyCache) pollLoop() {
	defer c.wg.Done()
	pause := c.cfg.retry
	failing := false
	for c.ctx.Err() == nil {
		addr := c.addrs[c.preferred]
		err := c.poll(addr)
		if c.ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.lastErr = err
		if err == nil {
			c.lastSuccess = time.Now()
		}
		c.mu.Unlock()
		if err == nil {
			if failing {
				c.cfg.lg.Info("policy: meta server answering again", zap.String("addr", addr))
			}
			failing, pause = false, c.cfg.retry
			continue
		}
		c.failures.Add(1)
		if !failing {
			c.cfg.lg.Warn("policy: cannot fetch the policy; keeping the one we have", zap.String("addr", addr),
				zap.Uint64("version", c.authority.Version()), zap.Error(err))
		} else {
			c.cfg.lg.Debug("policy: meta server failed", zap.String("addr", addr), zap.Error(err))
		}
		failing = true
		c.preferred = (c.preferred + 1) % len(c.addrs)
		select {
		case <-time.After(pause):
		case <-c.ctx.Done():
			return
		}
		pause = min(2*pause, DefaultPolicyMaxRetry)
	}
}

// poll asks one meta server once (a long poll) and installs what it
// answers.
func (c *PolicyCache) poll(addr string) error {
	if c.cfg.creds != (auth.Credentials{}) && c.own == nil {
		body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: c.cfg.creds.Name, Secret: c.cfg.creds.Secret})
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(c.ctx, DefaultRequestTimeout)
		_, err = c.cfg.caller.Call(actx, addr, protocol.CmdAuth, body)
		cancel()
		if err != nil {
			return fmt.Errorf("authenticate as %s: %w", c.cfg.creds.Name, err)
		}
	}
	have := c.authority.Version()
	if c.takeAny {
		have = 0
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.wait+DefaultRequestTimeout)
	defer cancel()
	resp, err := c.cfg.caller.Call(ctx, addr, protocol.CmdPolicy, protocol.AppendPolicyRequest(nil, &protocol.PolicyRequest{Version: have, Wait: c.cfg.wait}))
	if err != nil {
		return err
	}
	pr, err := protocol.DecodePolicyResponse(resp)
	if err != nil {
		return err
	}
	c.polls.Add(1)
	if len(pr.Policy) == 0 {
		c.noteBehind(pr.Version < have)
		return nil
	}
	p, err := auth.ParsePolicy(pr.Policy)
	if err != nil {
		return err
	}
	if p.Version() != pr.Version {
		return fmt.Errorf("metaclient: policy of version %d in an answer of version %d", p.Version(), pr.Version)
	}
	if p.Version() <= c.authority.Version() && !c.takeAny {
		c.noteBehind(p.Version() < c.authority.Version())
		return nil
	}
	c.install(p, pr.Policy)
	return nil
}

// noteBehind tracks how long the meta servers have answered with older
// versions than ours; past rollbackAfter the next policy is taken anyway.
func (c *PolicyCache) noteBehind(behind bool) {
	switch {
	case !behind:
		c.behindSince = time.Time{}
	case c.behindSince.IsZero():
		c.behindSince = time.Now()
	case time.Since(c.behindSince) >= c.cfg.rollbackAfter && !c.takeAny:
		c.takeAny = true
		c.cfg.lg.Warn("policy: every meta server has been on an older policy version for long; taking theirs",
			zap.Uint64("version", c.authority.Version()), zap.Duration("for", time.Since(c.behindSince)))
	}
}

// install makes p the policy and writes it to the cache file.
func (c *PolicyCache) install(p *auth.Policy, encoded []byte) {
	if c.takeAny {
		c.authority.Replace(p)
	} else if !c.authority.Update(p) {
		return
	}
	c.takeAny, c.behindSince = false, time.Time{}
	c.updates.Add(1)
	if err := writePolicyFile(c.path, encoded); err != nil {
		c.persistFailures.Add(1)
		c.cfg.lg.Error("policy: cannot write the cache file; a restart during a meta outage would start without it",
			zap.String("file", c.path), zap.Error(err))
	}
	c.cfg.lg.Info("policy installed", zap.Uint64("version", p.Version()), zap.Int("identities", p.Len()))
}

// policyFileMagic starts a policy cache file.
var policyFileMagic = []byte("QMQP")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func writePolicyFile(path string, encoded []byte) error {
	buf := make([]byte, 0, 8+len(encoded))
	buf = append(buf, policyFileMagic...)
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(encoded, castagnoli))
	buf = append(buf, encoded...)
	return auth.WriteSecretFile(path, buf)
}

// errPolicyFile: the cache file is not one this code wrote whole.
var errPolicyFile = errors.New("metaclient: policy cache file is damaged")

func readPolicyFile(path string) (*auth.Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 8 || !bytes.Equal(b[:4], policyFileMagic) {
		return nil, fmt.Errorf("%w: no header", errPolicyFile)
	}
	if crc32.Checksum(b[8:], castagnoli) != binary.BigEndian.Uint32(b[4:8]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errPolicyFile)
	}
	p, err := auth.ParsePolicy(b[8:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errPolicyFile, err)
	}
	return p, nil
}
