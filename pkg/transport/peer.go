package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/jitter"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// errConnGone: the connection closed before the request was queued; the
// caller redials and tries again.
var errConnGone = errors.New("transport: connection gone before send")

// errPeerRemoved: the peer was forgotten as idle while a caller held it;
// the caller looks the address up again.
var errPeerRemoved = errors.New("transport: peer removed")

// peer is the client's state for one server address: its breaker and its
// one connection, redialled with back-off when it drops.
type peer struct {
	client   *Client
	addr     string
	tls      *tls.Config // Options.TLS for this address (tlsFor), or nil
	breaker  *gobreaker.TwoStepCircuitBreaker[struct{}]
	lastUsed atomic.Int64 // client clock, nanoseconds

	// healthy is set while the breaker is closed and the last outcome it
	// recorded was a success. Then a request skips the breaker (two mutex
	// round trips and two clock reads) unless it fails: a success would
	// only add to counts that ReadyToTrip does not read, since consecutive
	// failures are already zero. The first failure is recorded in the
	// breaker and clears healthy; requests then pass through the breaker
	// until one succeeds while it is closed.
	healthy  atomic.Bool
	fastDone func(error) // p.recordFast, allocated once

	// open mirrors conn while it is usable and the peer is not removed, so
	// that a request finds its connection without p.mu.
	open atomic.Pointer[conn]

	mu           sync.Mutex
	conn         *conn         // nil or closed: dial on next use
	dialing      chan struct{} // non-nil while a dial runs; closed when it ends
	dialErr      error         // the last dial's failure
	nextDial     time.Time     // no dial before this (back-off)
	dialFailures int           // failed dials in a row (the back-off's exponent)
	removed      bool          // forgotten as idle; callers must look up again
}

func newPeer(client *Client, addr string) *peer {
	p := &peer{client: client, addr: addr}
	if client.opts.TLS != nil {
		p.tls = tlsFor(client.opts.TLS, addr)
	}
	p.healthy.Store(true)
	p.fastDone = p.recordFast
	o := client.opts
	interval := o.BreakerInterval
	if interval < 0 {
		interval = 0
	}
	p.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        addr,
		MaxRequests: o.BreakerProbes,
		Interval:    interval,
		Timeout:     o.BreakerOpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= o.BreakerFailures },
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to != gobreaker.StateClosed {
				p.healthy.Store(false)
			}
			client.lg.Warn("circuit breaker", zap.String("addr", name), zap.Stringer("from", from), zap.Stringer("to", to))
		},
		IsSuccessful: isBreakerSuccess,
		IsExcluded:   isBreakerExcluded,
	})
	return p
}

// isBreakerSuccess: any answer from the server, whatever its status, shows
// the address works.
func isBreakerSuccess(err error) bool {
	if err == nil {
		return true
	}
	var pe *protocol.Error
	return errors.As(err, &pe)
}

// isBreakerExcluded: the caller's own cancellation says nothing about the
// address.
func isBreakerExcluded(err error) bool { return errors.Is(err, context.Canceled) }

// allow asks the breaker to let a request through and returns the function
// that records the request's outcome, and whether the request is a
// half-open breaker's probe.
func (p *peer) allow() (done func(error), probe bool, err error) {
	if p.healthy.Load() {
		return p.fastDone, false, nil
	}
	bdone, err := p.breaker.Allow()
	if err != nil {
		p.mu.Lock()
		last := p.dialErr
		p.mu.Unlock()
		if last != nil { // say why, or the cause (a certificate, say) hides behind the breaker
			return nil, false, fmt.Errorf("%w: %s: %w (last dial: %w)", ErrBreakerOpen, p.addr, err, last)
		}
		return nil, false, fmt.Errorf("%w: %s: %w", ErrBreakerOpen, p.addr, err)
	}
	return func(err error) {
		bdone(err)
		if isBreakerSuccess(err) && p.breaker.State() == gobreaker.StateClosed {
			p.healthy.Store(true)
		}
	}, p.breaker.State() == gobreaker.StateHalfOpen, nil
}

// recordFast records the outcome of a request that skipped the breaker:
// only a failure reaches it.
func (p *peer) recordFast(err error) {
	if err == nil || isBreakerSuccess(err) || isBreakerExcluded(err) {
		return
	}
	p.healthy.Store(false)
	if done, aerr := p.breaker.Allow(); aerr == nil {
		done(err)
	}
}

// getConn returns an open connection, dialling one if needed. Concurrent
// callers share one dial; after a failed dial, calls fail fast with ErrDial
// until the back-off has passed.
func (p *peer) getConn(ctx context.Context) (*conn, error) {
	if c := p.open.Load(); c != nil && !c.closed() {
		return c, nil
	}
	p.mu.Lock()
	for {
		if p.removed {
			p.mu.Unlock()
			return nil, errPeerRemoved
		}
		if p.conn != nil && !p.conn.closed() {
			c := p.conn
			p.mu.Unlock()
			return c, nil
		}
		if p.dialing != nil {
			ch := p.dialing
			p.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			p.mu.Lock()
			if p.conn == nil || p.conn.closed() {
				err := p.dialErr
				p.mu.Unlock()
				return nil, fmt.Errorf("%w: %s: %w", ErrDial, p.addr, err)
			}
			continue
		}
		if now := time.Now(); now.Before(p.nextDial) {
			err := p.dialErr
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: %s (backing off for %v): %w", ErrDial, p.addr, p.nextDial.Sub(now).Round(time.Millisecond), err)
		}
		break
	}
	ch := make(chan struct{})
	p.dialing = ch
	p.mu.Unlock()

	c, err := p.dial(ctx)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.dialing = nil
	close(ch)
	if err != nil {
		if ctx.Err() == nil { // a cancelled caller says nothing about the address
			if isRefused(err) && (p.dialErr == nil || p.dialErr.Error() != err.Error()) {
				p.client.lg.Warn("server refused the connection", zap.String("addr", p.addr), zap.Error(err))
			}
			p.dialFailures++
			backoff := jitter.Nth(p.client.opts.RedialBackoffMin, p.client.opts.RedialBackoffMax, p.dialFailures)
			if isRefused(err) { // it would be refused again: see secure.go
				backoff = p.client.opts.RedialBackoffMax
			}
			p.nextDial = time.Now().Add(backoff)
		}
		p.dialErr = err
		return nil, fmt.Errorf("%w: %s: %w", ErrDial, p.addr, err)
	}
	if p.client.isClosed() {
		c.close(errClientClosing)
		return nil, ErrClosed
	}
	if p.removed {
		c.close(errPeerRemoved)
		return nil, errPeerRemoved
	}
	p.dialFailures, p.dialErr = 0, nil
	p.conn = c
	p.open.Store(c)
	return c, nil
}

func (p *peer) dial(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.client.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	nc, err := p.secure(ctx, raw)
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	p.client.lg.Debug("connected", zap.String("addr", p.addr))
	return newConn(p.client, p.addr, nc, raw), nil
}

// closeConn closes the peer's connection, failing its pending calls.
func (p *peer) closeConn(cause error) {
	p.mu.Lock()
	c := p.conn
	p.conn = nil
	p.open.Store(nil)
	p.mu.Unlock()
	if c != nil {
		c.close(cause)
	}
}
