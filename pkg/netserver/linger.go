package netserver

import (
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// refuseLinger is how long a connection the server refused while it was
// still sending (a frame over MaxPartialBytes) lingers before it closes.
//
// Closing a socket with unread bytes in it makes the kernel reset the
// connection, and a reset can overtake the answer just written: the
// client would see "connection reset" instead of StatusBusy. So the
// server writes the answer, shuts its side down (the client reads the
// answer, then EOF), and discards what still comes until the client
// closes or refuseLinger passes. A lingering connection holds no memory:
// its partial frame is dropped at once.
const refuseLinger = time.Second

// lingerGnet starts lingering on a gnet connection the loop refused, once
// the answer is on the socket; it reports false (close at once) when the
// answer is not all written yet. The sweep closes the connection when
// refuseLinger has passed; OnTraffic discards what comes meanwhile.
func (c *Conn) lingerGnet(gc gnet.Conn) bool {
	if c.tls != nil {
		c.closeNotifyTLS(gc)
	}
	if gc.OutboundBuffered() > 0 || unix.Shutdown(c.fd, unix.SHUT_WR) != nil {
		return false
	}
	c.discarding = true
	c.dropLarge()
	c.holdSmall(0)
	_, _ = gc.Discard(-1)
	c.lingerSince.Store(time.Now().UnixNano())
	return true
}
