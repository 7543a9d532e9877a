package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"go.uber.org/zap"
)

// Handler handles one message. nil acks it; an error retries it (see
// RetryAfter). ctx ends when the subscription closes.
type Handler func(ctx context.Context, m *Message) error

// Consumer subscribes to subjects. It is safe for concurrent use.
type Consumer struct {
	cfg       config
	id        string
	lg        *zap.Logger
	transport *transport.Client
	ownsTrans bool
	meta      *metaclient.Client // made by New for WithMetaServers; Close closes it
	// retries publishes retry and dead-letter copies.
	retries *producer.Producer

	mu     sync.Mutex
	subs   map[string]*Subscription
	closed bool
}

// New returns a consumer. It needs WithMetaServers, WithResolver or
// WithBrokers.
func New(opts ...Option) (*Consumer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lg := cfg.logger
	if lg == nil {
		lg = zap.NewNop()
	}
	c := &Consumer{cfg: cfg, id: cfg.consumerID, lg: lg.Named("consumer"), transport: cfg.transport, subs: map[string]*Subscription{}}
	if c.id == "" {
		c.id = defaultConsumerID()
	}
	if c.transport == nil {
		topts := cfg.transportOpts
		if topts.TLS == nil {
			topts.TLS = cfg.tls
		}
		if topts.Credentials == nil && cfg.credentials != nil {
			creds, err := cfg.credentials()
			if err != nil {
				return nil, fmt.Errorf("consumer: credentials: %w", err)
			}
			topts.Credentials = creds
		}
		t, err := transport.New(topts, lg)
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		c.transport, c.ownsTrans = t, true
	}
	if len(cfg.metaServers) > 0 {
		mc, err := metaclient.New(cfg.metaServers, c.id, metaclient.WithCaller(c.transport), metaclient.WithLogger(lg))
		if err != nil {
			if c.ownsTrans {
				c.transport.Close()
			}
			return nil, fmt.Errorf("consumer: %w", err)
		}
		c.meta, c.cfg.resolver = mc, mc
	}
	p, err := producer.New(producer.WithResolver(c.cfg.resolver), producer.WithTransport(c.transport),
		producer.WithLogger(lg), producer.WithDelayFallback())
	if err != nil {
		if c.meta != nil {
			_ = c.meta.Close()
		}
		if c.ownsTrans {
			c.transport.Close()
		}
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c.retries = p
	return c, nil
}

// ID returns the consumer's id.
func (c *Consumer) ID() string { return c.id }

// Subscribe starts receiving subject's messages for group and handing them
// to h. Subject and group must be valid names.
func (c *Consumer) Subscribe(subject, group string, h Handler, opts ...SubscribeOption) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("consumer: nil handler")
	}
	return c.subscribe(subject, group, h, opts)
}

func (c *Consumer) subscribe(subject, group string, h Handler, opts []SubscribeOption) (*Subscription, error) {
	if err := protocol.DefaultLimits.CheckSubject(subject); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	if err := protocol.DefaultLimits.CheckGroup(group); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	sc := defaultSubConfig()
	for _, o := range opts {
		o(&sc)
	}
	if err := sc.validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	key := subject + "%" + group
	if c.subs[key] != nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrAlreadySubscribed, subject, group)
	}
	s := newSubscription(c, subject, group, h, sc)
	c.subs[key] = s
	s.start()
	return s, nil
}

func (c *Consumer) forget(s *Subscription) {
	c.mu.Lock()
	delete(c.subs, s.subject+"%"+s.group)
	c.mu.Unlock()
}

// Close closes every subscription (see Subscription.Close) and releases the
// consumer's connections.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.retries.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if c.meta != nil {
		_ = c.meta.Close()
	}
	if c.ownsTrans {
		c.transport.Close()
	}
	return errors.Join(errs...)
}
