package consumer

import (
	"context"
	"sync"
	"time"
)

// IdempotencyChecker lets a subscription skip messages that were already
// handled, keyed by message id (duplicates happen around failures: a crash
// between handling and ack, a lost ack, a failover).
type IdempotencyChecker interface {
	// Begin reports whether msg should be handled; false acks it unhandled.
	Begin(ctx context.Context, msg *Message) (bool, error)
	// End records the handler's result: nil means handled for good; an
	// error means the message will come again and must not count as seen.
	End(ctx context.Context, msg *Message, handlerErr error)
}

// MemoryIdempotency remembers handled ids in memory for a window: enough
// for one process's duplicates; use a shared store across processes.
type MemoryIdempotency struct {
	window time.Duration
	mu     sync.Mutex
	seen   map[string]time.Time // id → when handled
	busy   map[string]bool      // ids being handled now
	swept  time.Time
}

// NewMemoryIdempotency returns a checker that remembers ids for window.
func NewMemoryIdempotency(window time.Duration) *MemoryIdempotency {
	return &MemoryIdempotency{window: window, seen: map[string]time.Time{}, busy: map[string]bool{}}
}

func key(m *Message) string { return m.Group + "%" + m.ID }

// Begin implements IdempotencyChecker.
func (c *MemoryIdempotency) Begin(_ context.Context, m *Message) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.swept) > c.window/4 {
		for id, at := range c.seen {
			if now.Sub(at) > c.window {
				delete(c.seen, id)
			}
		}
		c.swept = now
	}
	k := key(m)
	if _, ok := c.seen[k]; ok || c.busy[k] {
		return false, nil
	}
	c.busy[k] = true
	return true, nil
}

// End implements IdempotencyChecker.
func (c *MemoryIdempotency) End(_ context.Context, m *Message, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(m)
	delete(c.busy, k)
	if err == nil {
		c.seen[k] = time.Now()
	}
}
