package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// rawConn is the rpc suite's own client connection, plain or TLS alike
// (pkg/transport speaks plaintext only): it writes ping frames, coalescing
// whatever is ready into one write as pkg/transport does, and reads their
// echoes.
type rawConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(addr string, cfg *tls.Config) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		tc := tls.Client(nc, cfg)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			nc.Close()
			return nil, err
		}
		_ = tc.SetDeadline(time.Time{})
		nc = tc
	}
	return &rawConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}, nil
}

// readReply reads one response frame and checks its body's length.
func (c *rawConn) readReply(hdr []byte, payload int) error {
	if _, err := io.ReadFull(c.br, hdr); err != nil {
		return err
	}
	h, err := protocol.ParseHeader(hdr, 0)
	if err != nil {
		return err
	}
	if h.Status() != protocol.StatusOK || int(h.BodyLen) != payload {
		return fmt.Errorf("reply %v with %d bytes", h.Status(), h.BodyLen)
	}
	_, err = c.br.Discard(int(h.BodyLen))
	return err
}

// rawPipelined keeps window pings in flight on each of conns connections
// for length and returns how many completed and how long that took.
func rawPipelined(addr string, cfg *tls.Config, conns, window, payload int, length time.Duration) (int64, time.Duration, error) {
	var (
		completed atomic.Int64
		stop      atomic.Bool
		wg        sync.WaitGroup
		errMu     sync.Mutex
		firstErr  error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop.Store(true)
	}
	cs := make([]*rawConn, conns)
	for i := range cs {
		c, err := dialRaw(addr, cfg)
		if err != nil {
			return 0, 0, err
		}
		defer c.nc.Close()
		cs[i] = c
	}
	body := make([]byte, payload)
	start := time.Now()
	for _, c := range cs {
		credits := make(chan struct{}, window)
		for range window {
			credits <- struct{}{}
		}
		wg.Add(2)
		go func() { // writer: as many requests as there are credits, one write
			defer wg.Done()
			var buf []byte
			id := uint64(0)
			for !stop.Load() {
				select {
				case <-credits:
				case <-time.After(10 * time.Millisecond):
					continue
				}
				n := 1
			more:
				for n < window {
					select {
					case <-credits:
						n++
					default:
						break more
					}
				}
				buf = buf[:0]
				for range n {
					id++
					buf = protocol.AppendRequest(buf, protocol.CmdPing, id, body)
				}
				if _, err := c.nc.Write(buf); err != nil {
					fail(err)
					return
				}
			}
		}()
		go func() { // reader: each echo gives a credit back
			defer wg.Done()
			hdr := make([]byte, protocol.HeaderSize)
			for !stop.Load() {
				_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				if err := c.readReply(hdr, payload); err != nil {
					if !stop.Load() {
						fail(err)
					}
					return
				}
				completed.Add(1)
				credits <- struct{}{}
			}
		}()
	}
	time.Sleep(length)
	stop.Store(true)
	elapsed := time.Since(start)
	n := completed.Load()
	for _, c := range cs {
		_ = c.nc.SetReadDeadline(time.Now()) // end the readers' waits
	}
	wg.Wait()
	var ne net.Error
	if errors.As(firstErr, &ne) && ne.Timeout() {
		firstErr = nil
	}
	return n, elapsed, firstErr
}

// rawSynchronous sends one ping at a time for length.
func rawSynchronous(addr string, cfg *tls.Config, payload int, length time.Duration) (int64, time.Duration, error) {
	c, err := dialRaw(addr, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer c.nc.Close()
	frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, make([]byte, payload))
	hdr := make([]byte, protocol.HeaderSize)
	var n int64
	start := time.Now()
	for time.Since(start) < length {
		if _, err := c.nc.Write(frame); err != nil {
			return n, time.Since(start), err
		}
		if err := c.readReply(hdr, payload); err != nil {
			return n, time.Since(start), err
		}
		n++
	}
	return n, time.Since(start), nil
}
