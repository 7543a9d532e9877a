package consumer

import (
	"context"
	"fmt"
)

// Puller lets a caller drive consumption: Pull returns messages, and the
// caller acks or nacks each (Message.Ack, Message.Nack). Un-acked messages
// count against MaxUnacked; a message never acked returns to the group when
// the Puller closes.
type Puller struct {
	s *Subscription
}

// Puller subscribes to (subject, group) for pulling by hand. Concurrency
// does not apply.
func (c *Consumer) Puller(subject, group string, opts ...SubscribeOption) (*Puller, error) {
	s, err := c.subscribe(subject, group, nil, opts)
	if err != nil {
		return nil, err
	}
	return &Puller{s: s}, nil
}

// Pull waits until at least one message is available (or ctx ends) and
// returns up to max messages.
func (p *Puller) Pull(ctx context.Context, max int) ([]*Message, error) {
	if max <= 0 {
		return nil, fmt.Errorf("consumer: pull max must be positive, got %d", max)
	}
	var out []*Message
	select {
	case d := <-p.s.work:
		out = append(out, d.msg)
	case <-p.s.stopPull:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(out) < max {
		select {
		case d := <-p.s.work:
			out = append(out, d.msg)
		default:
			return out, nil
		}
	}
	return out, nil
}

// Close stops pulling, waits for the acks and nacks of messages already
// pulled until ctx ends, and hands the rest back to the group.
func (p *Puller) Close(ctx context.Context) error { return p.s.Close(ctx) }
