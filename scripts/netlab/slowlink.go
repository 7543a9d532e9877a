package netlab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// SlowQueue bounds the frames waiting in one direction of a slow link;
	// a frame arriving at a full queue is dropped.
	SlowQueue = 8192
	// frameBuffer holds one frame with its virtio-net header: a GSO frame
	// can be 64 KiB.
	frameBuffer = 1 << 17
	// pollInterval is how often a blocked read looks at the stop flag.
	pollInterval = 100 * time.Millisecond
)

// SlowStats counts what a slow link did, both directions together.
type SlowStats struct {
	Forwarded, Dropped, Overflowed, Failed uint64
}

// slowLink is one host's forwarder: frames between the host's switch port
// (q<N>s<i>) and a veth pair whose other end (q<N>f<i>) is on the bridge
// (this end q<N>g<i>).
type slowLink struct {
	host   *Host
	delay  time.Duration
	loss   float64
	fds    [2]int // host port, bridge side
	quit   atomic.Bool
	wg     sync.WaitGroup
	counts struct{ forwarded, dropped, overflowed, failed atomic.Uint64 }
}

// Slow puts a forwarder between host and the bridge that delays every
// frame by delay and drops it with probability loss (0 to 1), each
// direction. Calling it again on a slow host changes nothing but returns
// an error; Unslow first.
func (l *Lab) Slow(host string, delay time.Duration, loss float64) error {
	h, err := l.host(host)
	if err != nil {
		return err
	}
	if delay < 0 || loss < 0 || loss > 1 {
		return fmt.Errorf("netlab: slow link: delay %v, loss %v", delay, loss)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.slow[host] != nil {
		return fmt.Errorf("netlab: %s is already slow", host)
	}
	port := l.port(h)
	bridgeEnd := fmt.Sprintf("q%df%d", l.id, h.index)
	ourEnd := fmt.Sprintf("q%dg%d", l.id, h.index)
	steps := [][]string{
		{"link", "add", bridgeEnd, "type", "veth", "peer", "name", ourEnd},
		{"link", "set", bridgeEnd, "master", "br0"},
		{"link", "set", bridgeEnd, "up"},
		{"link", "set", ourEnd, "up"},
		{"link", "set", port, "nomaster"},
	}
	for _, s := range steps {
		if err := ipIn(l.switchNS, s...); err != nil {
			ipIn(l.switchNS, "link", "del", bridgeEnd)
			ipIn(l.switchNS, "link", "set", port, "master", "br0")
			return err
		}
	}
	s := &slowLink{host: h, delay: delay, loss: loss, fds: [2]int{-1, -1}}
	err = inNamespace(l.switchNS, func() error {
		for i, name := range []string{port, ourEnd} {
			fd, err := packetSocket(name)
			if err != nil {
				return err
			}
			s.fds[i] = fd
		}
		return nil
	})
	if err != nil {
		for _, fd := range s.fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		ipIn(l.switchNS, "link", "del", bridgeEnd)
		ipIn(l.switchNS, "link", "set", port, "master", "br0")
		return err
	}
	s.start()
	l.slow[host] = s
	return nil
}

// Unslow takes the forwarder away and puts host's port back on the bridge.
// It returns what the forwarder did.
func (l *Lab) Unslow(host string) (SlowStats, error) {
	h, err := l.host(host)
	if err != nil {
		return SlowStats{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return SlowStats{}, ErrClosed
	}
	s := l.slow[host]
	if s == nil {
		return SlowStats{}, nil
	}
	delete(l.slow, host)
	s.stop()
	err = errors.Join(
		ipIn(l.switchNS, "link", "del", fmt.Sprintf("q%df%d", l.id, h.index)),
		ipIn(l.switchNS, "link", "set", l.port(h), "master", "br0"),
	)
	return s.stats(), err
}

// packetSocket opens a raw AF_PACKET socket on interface name of the
// calling thread's namespace, promiscuous, with virtio-net headers, reads
// timing out every pollInterval.
func packetSocket(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return -1, fmt.Errorf("netlab: %s: %w", name, err)
	}
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("netlab: packet socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("netlab: packet socket on %s: %s: %w", name, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fail("vnet header", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	mreq := &unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		return fail("promiscuous", err)
	}
	tv := unix.NsecToTimeval(pollInterval.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("read timeout", err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

type frame struct {
	due  time.Time
	data []byte
}

// start runs both directions: host → bridge and bridge → host.
func (s *slowLink) start() {
	for dir := range 2 {
		q := make(chan frame, SlowQueue)
		s.wg.Add(2)
		go s.readLoop(s.fds[dir], q)
		go s.writeLoop(s.fds[1-dir], q)
	}
}

// readLoop takes the frames arriving on fd (not those we send on it),
// drops some and queues the rest with their due times.
func (s *slowLink) readLoop(fd int, q chan<- frame) {
	defer s.wg.Done()
	defer close(q)
	buf := make([]byte, frameBuffer)
	for !s.quit.Load() {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			s.counts.failed.Add(1)
			time.Sleep(pollInterval)
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own write
		}
		if s.loss > 0 && rand.Float64() < s.loss {
			s.counts.dropped.Add(1)
			continue
		}
		f := frame{due: time.Now().Add(s.delay), data: append([]byte(nil), buf[:n]...)}
		select {
		case q <- f:
		default:
			s.counts.overflowed.Add(1)
		}
	}
}

// writeLoop sends the queued frames on fd at their due times, in order.
func (s *slowLink) writeLoop(fd int, q <-chan frame) {
	defer s.wg.Done()
	for f := range q {
		if wait := time.Until(f.due); wait > 0 {
			time.Sleep(wait)
		}
		if s.quit.Load() {
			continue // drain
		}
		if _, err := unix.Write(fd, f.data); err != nil {
			s.counts.failed.Add(1)
			continue
		}
		s.counts.forwarded.Add(1)
	}
}

// stop ends the loops and closes the sockets.
func (s *slowLink) stop() {
	s.quit.Store(true)
	s.wg.Wait()
	for _, fd := range s.fds {
		unix.Close(fd)
	}
}

func (s *slowLink) stats() SlowStats {
	return SlowStats{
		Forwarded:  s.counts.forwarded.Load(),
		Dropped:    s.counts.dropped.Load(),
		Overflowed: s.counts.overflowed.Load(),
		Failed:     s.counts.failed.Load(),
	}
}
