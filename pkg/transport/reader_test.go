package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// connOf returns the client's open connection to addr, or nil.
func connOf(c *Client, addr string) *conn {
	c.mu.RLock()
	p := c.peers[addr]
	c.mu.RUnlock()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

// readerOf returns who holds addr's reading role and how often it changed
// hands.
func readerOf(c *Client, addr string) (*call, uint64) {
	cn := connOf(c, addr)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.reader, cn.readerGen
}

// Calls one at a time each read their own response: every one takes the
// reading role, and nobody reads between them (readLoop is not woken).
func TestReader_LoneCallsReadTheirOwnResponses(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux())
	addr := s.Addr().String()
	c := newClient(t, Options{})
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	_, gen0 := readerOf(c, addr)
	const n = 100
	for i := range n {
		body := fmt.Appendf(nil, "ping %d", i)
		got, err := c.Call(context.Background(), addr, protocol.CmdPing, body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Call = %q, %v", got, err)
		}
	}
	reader, gen := readerOf(c, addr)
	if reader != nil && reader != loopReader {
		t.Fatalf("a finished Call still holds the reading role")
	}
	// The sweep may hand the idle connection to readLoop at most once in
	// a while (a hand-over counts as the Call that then follows readLoop);
	// each Call otherwise took the role itself. A hand-over between the
	// first Call and gen0's reading (a 20 ms pause on a loaded machine) is
	// not counted, hence n-1.
	if gen-gen0 < n-1 {
		t.Fatalf("the role changed hands %d times for %d lone Calls, want at least %d", gen-gen0, n, n-1)
	}
}

// A leader completes the Calls whose responses it reads while it waits for
// its own; cancelled while it blocks in the read, it returns at once, and
// the connection keeps working.
func TestReader_LeaderAnswersOthersAndCancels(t *testing.T) {
	hs := startHoldServer(t)
	addr := hs.Addr().String()
	c := newClient(t, Options{RequestTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaderErr := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, addr, protocol.CmdSend, []byte("held"))
		leaderErr <- err
	}()
	waitFor(t, 5*time.Second, "the leader's request at the server", func() bool { return hs.count() == 1 })
	leader, _ := readerOf(c, addr)
	if leader == nil || leader == loopReader {
		t.Fatal("a lone Call does not hold the reading role")
	}
	for i := range 20 {
		body := fmt.Appendf(nil, "follower %d", i)
		got, err := c.Call(context.Background(), addr, protocol.CmdPing, body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Call beside a leader = %q, %v", got, err)
		}
		if r, _ := readerOf(c, addr); r != leader {
			t.Fatal("the leader lost the reading role while it waits")
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-leaderErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled leader = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled leader blocked in the read did not return")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the cancelled leader returned after %v", d)
	}
	for _, r := range hs.take() {
		r.Reply(protocol.StatusOK, []byte("late")) // dropped
	}
	for i := range 5 {
		body := fmt.Appendf(nil, "after %d", i)
		if got, err := c.Call(context.Background(), addr, protocol.CmdPing, body); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Call after a cancelled leader = %q, %v", got, err)
		}
	}
}

// A leader that times out passes the reading role to a Call that follows
// it, which then reads its own response; with only a Go request left, the
// role goes to readLoop.
func TestReader_TimedOutLeaderPassesTheRole(t *testing.T) {
	hs := startHoldServer(t)
	addr := hs.Addr().String()
	c := newClient(t, Options{RequestTimeout: time.Minute, BreakerFailures: 100})

	leaderErr := make(chan error, 1)
	go func() {
		_, err := c.CallTimeout(context.Background(), addr, protocol.CmdSend, []byte("leader"), 200*time.Millisecond)
		leaderErr <- err
	}()
	waitFor(t, 5*time.Second, "the leader's request at the server", func() bool { return hs.count() == 1 })
	leader, _ := readerOf(c, addr)
	type res struct {
		body []byte
		err  error
	}
	followerRes := make(chan res, 1)
	go func() {
		body, err := c.Call(context.Background(), addr, protocol.CmdSend, []byte("follower"))
		followerRes <- res{body, err}
	}()
	waitFor(t, 5*time.Second, "the follower's request at the server", func() bool { return hs.count() == 2 })
	if err := <-leaderErr; !errors.Is(err, ErrTimeout) {
		t.Fatalf("leader = %v, want ErrTimeout", err)
	}
	waitFor(t, 5*time.Second, "the follower to take the reading role", func() bool {
		r, _ := readerOf(c, addr)
		return r != leader && r != nil && r != loopReader
	})
	for _, r := range hs.take() {
		r.Reply(protocol.StatusOK, r.Body)
	}
	select {
	case r := <-followerRes:
		if r.err != nil || string(r.body) != "follower" {
			t.Fatalf("follower = %q, %v", r.body, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower holding the role never read its response")
	}

	// A leader times out with a Go request pending: readLoop reads for it.
	go func() {
		_, err := c.CallTimeout(context.Background(), addr, protocol.CmdSend, []byte("leader"), 100*time.Millisecond)
		leaderErr <- err
	}()
	waitFor(t, 5*time.Second, "the leader's request at the server", func() bool { return hs.count() == 1 })
	goRes := make(chan res, 1)
	if err := c.Go(addr, protocol.CmdSend, []byte("async"), 0, func(body []byte, err error) { goRes <- res{body, err} }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the Go request at the server", func() bool { return hs.count() == 2 })
	if err := <-leaderErr; !errors.Is(err, ErrTimeout) {
		t.Fatalf("leader = %v, want ErrTimeout", err)
	}
	if r, _ := readerOf(c, addr); r != loopReader {
		t.Fatal("the role did not go to readLoop with a Go request pending")
	}
	for _, r := range hs.take() {
		r.Reply(protocol.StatusOK, r.Body)
	}
	select {
	case r := <-goRes:
		if r.err != nil || string(r.body) != "async" {
			t.Fatalf("Go = %q, %v", r.body, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("readLoop never read the Go request's response")
	}
}

// A server that closes a connection nobody reads (the last Call read its
// response and left) is noticed by readLoop once the sweep hands it the
// idle connection, and the next Call redials instead of failing.
func TestReader_IdleConnectionCloseNoticed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() { // answers one ping per connection, then closes it
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			n, _ := nc.Read(buf)
			if f, _, err := protocol.ReadFrame(buf[:n], 4096); err == nil {
				h := f.Header
				h.Flags |= protocol.FlagResponse
				h.Code = uint16(protocol.StatusOK)
				_, _ = nc.Write(append(protocol.AppendHeader(nil, h), f.Body...))
			}
			nc.Close()
		}
	}()
	addr := ln.Addr().String()
	c := newClient(t, Options{})
	for i := range 3 {
		body := fmt.Appendf(nil, "ping %d", i)
		if got, err := c.Call(context.Background(), addr, protocol.CmdPing, body); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Call %d = %q, %v", i, got, err)
		}
		cn := connOf(c, addr)
		waitFor(t, 5*time.Second, "the idle connection's close to be noticed", cn.closed)
	}
}

// Calls with short deadlines and cancellations beside Go requests, against
// a server answering late and out of order: every request ends exactly
// once with its own body or a timeout, whoever held the reading role.
func TestReader_StressCancellationsAndPipelining(t *testing.T) {
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *netserver.Request) {
		d := time.Duration(rand.IntN(2000)) * time.Microsecond
		time.AfterFunc(d, func() { r.Reply(protocol.StatusOK, r.Body) })
	})
	s := startServer(t, "127.0.0.1:0", mux)
	addr := s.Addr().String()
	c := newClient(t, Options{BreakerFailures: 1 << 30})
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil { // dial first
		t.Fatal(err)
	}
	const callers, rounds = 8, 200
	var (
		wg       sync.WaitGroup
		answered atomic.Int64
		timedOut atomic.Int64
		failures = make(chan error, callers+1)
	)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				body := fmt.Appendf(nil, "%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
				if i%3 == 0 {
					go func() { time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond); cancel() }()
				}
				got, err := c.Call(ctx, addr, protocol.CmdSend, body)
				cancel()
				switch {
				case err == nil && bytes.Equal(got, body):
					answered.Add(1)
				case err != nil && (errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled)):
					timedOut.Add(1)
				default:
					failures <- fmt.Errorf("Call %s = %q, %v", body, got, err)
					return
				}
			}
		}()
	}
	var goCalls, goDone atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		var inner sync.WaitGroup
		for i := range callers * rounds {
			body := fmt.Appendf(nil, "go-%d", i)
			inner.Add(1)
			goCalls.Add(1)
			err := c.Go(addr, protocol.CmdSend, body, time.Second, func(got []byte, err error) {
				defer inner.Done()
				if goDone.Add(1) > goCalls.Load() {
					failures <- errors.New("a Go callback ran twice")
				}
				if err != nil || !bytes.Equal(got, body) {
					failures <- fmt.Errorf("Go %s = %q, %v", body, got, err)
				}
			})
			if err != nil {
				inner.Done()
				failures <- err
				return
			}
			if i%16 == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		inner.Wait()
	}()
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if answered.Load()+timedOut.Load() != callers*rounds {
		t.Fatalf("%d answered + %d timed out of %d Calls", answered.Load(), timedOut.Load(), callers*rounds)
	}
	if goDone.Load() != goCalls.Load() {
		t.Fatalf("%d of %d Go callbacks ran", goDone.Load(), goCalls.Load())
	}
	t.Logf("%d Calls answered, %d timed out or cancelled, %d Go requests", answered.Load(), timedOut.Load(), goDone.Load())
	for i := range 10 {
		body := fmt.Appendf(nil, "after %d", i)
		if got, err := c.Call(context.Background(), addr, protocol.CmdSend, body); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Call after the storm = %q, %v", got, err)
		}
	}
}

// A leader cancelled halfway through a response larger than the read
// buffer leaves the rest of the frame to the next reader, which skips it
// and reads its own response after it.
func TestReader_CancelledMidFrameResumes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const bigBody, firstPart = 3 * readBufferSize, readBufferSize / 2
	more := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		readRequest := func() protocol.Header {
			hb := make([]byte, protocol.HeaderSize)
			if _, err := io.ReadFull(br, hb); err != nil {
				return protocol.Header{}
			}
			h, _ := protocol.ParseHeader(hb, protocol.DefaultMaxFrameSize)
			_, _ = io.ReadFull(br, make([]byte, h.BodyLen))
			return h
		}
		answer := func(h protocol.Header, body []byte) []byte {
			h.Flags, h.Code, h.BodyLen = protocol.FlagResponse, uint16(protocol.StatusOK), uint32(len(body))
			return append(protocol.AppendHeader(nil, h), body...)
		}
		big := answer(readRequest(), bytes.Repeat([]byte("b"), bigBody))
		cut := protocol.HeaderSize + firstPart
		_, _ = nc.Write(big[:cut])
		<-more
		ping := readRequest()
		_, _ = nc.Write(big[cut:])
		_, _ = nc.Write(answer(ping, []byte("after the big one")))
	}()
	addr := ln.Addr().String()
	c := newClient(t, Options{RequestTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, addr, protocol.CmdSend, []byte("big please"))
		leaderErr <- err
	}()
	waitFor(t, 5*time.Second, "half of the big frame read", func() bool {
		cn := connOf(c, addr)
		if cn == nil {
			return false
		}
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.rs.large != nil
	})
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader = %v, want context.Canceled", err)
	}
	cn := connOf(c, addr)
	cn.mu.Lock()
	cut := cn.rs.large != nil && cn.rs.largeRead < bigBody
	cn.mu.Unlock()
	if !cut {
		t.Fatal("the cancelled leader did not leave a frame half read")
	}
	close(more)
	got, err := c.Call(context.Background(), addr, protocol.CmdPing, []byte("ping"))
	if err != nil || string(got) != "after the big one" {
		t.Fatalf("Call after the cut frame = %q, %v", got, err)
	}
}

// Calls and Go requests from several goroutines to two servers, answered
// after a random delay: followers come and go on both connections while
// their pooled calls move from one connection to the other, and every
// request is answered, none left with nobody reading its connection.
func TestReader_ConcurrentCallsOverTwoConnections(t *testing.T) {
	var addrs []string
	for range 2 {
		mux := netserver.NewMux()
		mux.HandleFunc(protocol.CmdSend, func(r *netserver.Request) {
			d := time.Duration(200+rand.IntN(2000)) * time.Microsecond
			time.AfterFunc(d, func() { r.Reply(protocol.StatusOK, r.Body) })
		})
		addrs = append(addrs, startServer(t, "127.0.0.1:0", mux).Addr().String())
	}
	c := newClient(t, Options{RequestTimeout: 5 * time.Second})
	var wg sync.WaitGroup
	const callers, calls = 6, 300
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				body := fmt.Appendf(nil, "%d-%d", g, i)
				addr := addrs[rand.IntN(len(addrs))]
				if g == 0 && i%2 == 0 {
					ch := make(chan error, 1)
					if err := c.Go(addr, protocol.CmdSend, body, 0, func(got []byte, err error) {
						if err == nil && !bytes.Equal(got, body) {
							err = fmt.Errorf("got %q", got)
						}
						ch <- err
					}); err != nil {
						t.Error(err)
						return
					}
					if err := <-ch; err != nil {
						t.Errorf("Go %s: %v", body, err)
						return
					}
					continue
				}
				got, err := c.Call(context.Background(), addr, protocol.CmdSend, body)
				if err != nil || !bytes.Equal(got, body) {
					t.Errorf("Call %s = %q, %v", body, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A leader whose call was completed by someone else while it blocked (the
// sweep, a close) and whose response then comes drops the response, returns
// the result it was given, and leaves the connection working.
func TestReader_LeaderDropsTheResponseOfACallCompletedMeanwhile(t *testing.T) {
	hs := startHoldServer(t)
	addr := hs.Addr().String()
	c := newClient(t, Options{RequestTimeout: time.Minute})
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		body []byte
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		body, err := c.Call(context.Background(), addr, protocol.CmdSend, []byte("held"))
		done <- outcome{body, err}
	}()
	waitFor(t, 5*time.Second, "the held request", func() bool { return hs.count() == 1 })
	leader, _ := readerOf(c, addr)
	if leader == nil || leader == loopReader {
		t.Fatal("the lone Call does not lead")
	}
	// Complete it as the sweep would, without interrupting its read.
	completedMeanwhile := errors.New("completed meanwhile")
	cn := connOf(c, addr)
	if !cn.remove(leader.id) {
		t.Fatal("the leader's call was not pending")
	}
	leader.complete(nil, completedMeanwhile)
	hs.take()[0].Reply(protocol.StatusOK, []byte("late answer"))
	select {
	case o := <-done:
		if !errors.Is(o.err, completedMeanwhile) || o.body != nil {
			t.Fatalf("Call = %q, %v; want the result it was given", o.body, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader did not return")
	}
	if got, err := c.Call(context.Background(), addr, protocol.CmdPing, []byte("after")); err != nil || string(got) != "after" {
		t.Fatalf("next Call = %q, %v", got, err)
	}
	if reader, _ := readerOf(c, addr); reader != nil && reader != loopReader {
		t.Fatal("a finished Call still holds the reading role")
	}
}
