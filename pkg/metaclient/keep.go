package metaclient

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Keeper keeps a broker registered for as long as it runs: it retries
// Register (with back-off) until a meta server answers, so a broker can
// start while the meta servers are down, and then lets the registration's
// own heartbeat loop run. Close unregisters.
type Keeper struct {
	addrs []string
	b     Broker
	opts  []Option
	lg    *zap.Logger

	mu   sync.Mutex
	reg  *Registration
	stop chan struct{}
	done chan struct{}
}

// Keep starts keeping b registered with the meta servers at addrs.
func Keep(addrs []string, b Broker, lg *zap.Logger, opts ...Option) *Keeper {
	if lg == nil {
		lg = zap.NewNop()
	}
	k := &Keeper{addrs: addrs, b: b, opts: append([]Option{WithLogger(lg)}, opts...), lg: lg,
		stop: make(chan struct{}), done: make(chan struct{})}
	go k.registerLoop()
	return k
}

func (k *Keeper) registerLoop() {
	defer close(k.done)
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reg, err := Register(ctx, k.addrs, k.b, k.opts...)
		cancel()
		if err == nil {
			k.mu.Lock()
			k.reg = reg
			k.mu.Unlock()
			k.lg.Info("registered with the meta server", zap.String("broker_group", k.b.Group), zap.String("address", k.b.Address),
				zap.Duration("ttl", reg.TTL()))
			return
		}
		k.lg.Warn("cannot register with the meta server; retrying", zap.Strings("meta", k.addrs), zap.Duration("backoff", backoff), zap.Error(err))
		select {
		case <-k.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Registered reports whether the broker is registered and its last
// heartbeat reached a meta server.
func (k *Keeper) Registered() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reg != nil && k.reg.Healthy()
}

// Registration returns the registration once there is one, else nil.
func (k *Keeper) Registration() *Registration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reg
}

// Close stops trying and unregisters the broker (until ctx ends).
func (k *Keeper) Close(ctx context.Context) error {
	close(k.stop)
	<-k.done
	k.mu.Lock()
	reg := k.reg
	k.mu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Close(ctx)
}
