package metaclient

import (
	"context"
	"fmt"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
)

// A Client is the route.Resolver the producer, the consumer and the delay
// server's forwarder use with a meta server.
var _ route.Resolver = (*Client)(nil)

// Resolve implements route.Resolver: every group of the subject's route,
// with its master's address and state (clients pick writable or readable
// ones). A consumer's request carries its id, so the meta server can tell
// it whether it was taken offline (see RegisterConsumer).
func (c *Client) Resolve(ctx context.Context, req route.Request) ([]route.Group, error) {
	k, err := c.keyOf(req)
	if err != nil {
		return nil, err
	}
	r, err := c.lookup(ctx, k)
	if err != nil {
		return nil, err
	}
	if len(r.Groups) == 0 {
		return nil, fmt.Errorf("%w for %s %q", route.ErrNoGroups, req.Kind, req.Subject)
	}
	out := make([]route.Group, 0, len(r.Groups))
	for _, g := range r.Groups {
		out = append(out, route.Group{Name: g.Group, Addr: g.Master, State: routeState(g), Epoch: g.Epoch})
	}
	return out, nil
}

// Invalidate implements route.Resolver: the route is looked up again soon.
func (c *Client) Invalidate(req route.Request) {
	if k, err := c.keyOf(req); err == nil {
		c.refresh(k)
	}
}

func (c *Client) keyOf(req route.Request) (routeKey, error) {
	k := routeKey{subject: req.Subject, clientID: c.clientID}
	switch req.Kind {
	case route.Produce:
		k.clientType = protocol.ClientProducer
	case route.ProduceDelay:
		k.clientType = protocol.ClientDelayProducer
	case route.Consume:
		k.clientType, k.group = protocol.ClientConsumer, req.Group
		if req.ClientID != "" {
			k.clientID = req.ClientID
		}
	default:
		return routeKey{}, fmt.Errorf("metaclient: unknown route kind %v", req.Kind)
	}
	return k, nil
}

// routeState maps a group's protocol state to the client's: a group with
// no master address is unavailable whatever it says.
func routeState(g protocol.RouteGroup) route.State {
	switch {
	case g.Master == "" || g.State == protocol.GroupUnavailable:
		return route.Unavailable
	case g.State == protocol.GroupReadonly:
		return route.Readonly
	case g.State == protocol.GroupReadWrite:
		return route.ReadWrite
	}
	return route.Unavailable
}
