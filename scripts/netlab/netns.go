package netlab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// inNamespace runs fn on an OS thread moved into namespace ns and returns
// its error. The thread is never moved back: it ends with fn (a goroutine
// that returns while locked to its thread takes the thread with it; the
// process's main thread is parked for good instead, so ip netns pids may
// name this process: removeLab spares it), so no other goroutine ever runs
// in ns. Sockets fn makes stay in ns and may be
// used from any goroutine.
func inNamespace(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			done <- fmt.Errorf("netlab: namespace %s: %w", ns, err)
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			done <- fmt.Errorf("netlab: setns %s: %w", ns, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// DialContext connects to addr from host's namespace, as a program running
// there would. The connection's socket lives in that namespace; the caller
// uses it as any net.Conn.
func (l *Lab) DialContext(ctx context.Context, host, network, addr string) (net.Conn, error) {
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	err = inNamespace(h.NS, func() error {
		// A literal address: the dial makes its socket on this thread.
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections are made from host's
// namespace (a fresh connection per request, each request bounded by
// timeout).
func (l *Lab) HTTPClient(host string, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return l.DialContext(ctx, host, network, addr)
			},
			DisableKeepAlives: true,
		},
	}
}

// Listen listens on addr (an address of host, or ":port") in host's
// namespace.
func (l *Lab) Listen(host, network, addr string) (net.Listener, error) {
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	err = inNamespace(h.NS, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket is Listen for datagrams: a socket bound to addr in host's
// namespace, from which the caller may also send.
func (l *Lab) ListenPacket(host, network, addr string) (net.PacketConn, error) {
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	var pc net.PacketConn
	err = inNamespace(h.NS, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}
