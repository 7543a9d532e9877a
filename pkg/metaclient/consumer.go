package metaclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

type consumerKey struct {
	subject, group, clientID string
}

// ConsumerRegistration keeps one consumer of one (subject, group)
// registered with the meta servers.
type ConsumerRegistration struct {
	c       *Client
	key     consumerKey
	offline atomic.Bool
	lease   atomic.Int64
	ok      atomic.Bool // the last heartbeat succeeded

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// RegisterConsumer starts heartbeating consumer clientID of (subject,
// group); the first heartbeat is sent before it returns (its failure is
// logged, not returned: the loop keeps trying). A Client registers a key
// once; registering it again returns the running registration.
func (c *Client) RegisterConsumer(subject, group, clientID string) *ConsumerRegistration {
	k := consumerKey{subject, group, clientID}
	c.mu.Lock()
	if r, ok := c.consumers[k]; ok {
		c.mu.Unlock()
		return r
	}
	r := &ConsumerRegistration{c: c, key: k, stop: make(chan struct{}), done: make(chan struct{})}
	c.consumers[k] = r
	c.mu.Unlock()
	if c.static != nil {
		close(r.done)
		return r
	}
	interval := r.heartbeat(0)
	go r.heartbeatLoop(interval)
	return r
}

// Offline reports whether an admin took the consumer offline (as of the last
// heartbeat).
func (r *ConsumerRegistration) Offline() bool { return r.offline.Load() }

// Registered reports whether the last heartbeat reached a meta server.
func (r *ConsumerRegistration) Registered() bool { return r.ok.Load() }

func (r *ConsumerRegistration) heartbeatLoop(interval time.Duration) {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(interval):
		}
		interval = r.heartbeat(0)
	}
}

// heartbeat sends one heartbeat and returns when to send the next.
func (r *ConsumerRegistration) heartbeat(flags uint8) time.Duration {
	req := protocol.ClientHeartbeatRequest{Flags: flags, ClientType: protocol.ClientConsumer,
		Subject: r.key.subject, Group: r.key.group, ClientID: r.key.clientID, LeaseID: r.lease.Load()}
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.requestTimeout*time.Duration(len(r.c.addrs)))
	defer cancel()
	body, err := r.c.call(ctx, protocol.CmdClientHeartbeat, protocol.AppendClientHeartbeatRequest(nil, &req))
	var resp protocol.ClientHeartbeatResponse
	if err == nil {
		resp, err = protocol.DecodeClientHeartbeatResponse(body)
	}
	if err != nil {
		r.ok.Store(false)
		r.c.cfg.lg.Warn("consumer heartbeat failed", zap.String("subject", r.key.subject), zap.String("consumer_group", r.key.group), zap.Error(err))
		return time.Second
	}
	r.ok.Store(true)
	r.lease.Store(resp.LeaseID)
	r.offline.Store(resp.Flags&protocol.LookupConsumerOffline != 0)
	if resp.TTL <= 0 {
		return 10 * time.Second
	}
	return max(resp.TTL/3, 100*time.Millisecond)
}

// Close stops heartbeating and unregisters the consumer (best effort).
func (r *ConsumerRegistration) Close() {
	r.stopOnce.Do(func() {
		close(r.stop)
		<-r.done
		if r.c.static == nil {
			r.heartbeat(protocol.ClientLeaving)
		}
		r.c.mu.Lock()
		delete(r.c.consumers, r.key)
		r.c.mu.Unlock()
	})
}
