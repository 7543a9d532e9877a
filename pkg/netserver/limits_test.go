package netserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// bothPaths runs f on the plaintext path and on the TLS path.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	t.Run("plain", f)
	t.Run("tls", func(t *testing.T) {
		useTLS(t)
		f(t)
	})
}

// header returns the header of a ping request with a body of n bytes.
func header(id uint64, n int) []byte {
	return protocol.AppendHeader(nil, protocol.Header{Version: protocol.Version, Code: uint16(protocol.CmdPing),
		RequestID: id, BodyLen: uint32(n)})
}

// TestLimits_PartialFrameCap opens many connections that each send the
// header of a 1 MiB frame and a quarter of its body: the server holds no
// more than MaxPartialBytes for them (the first frame reserved whole, as
// long as half of the cap holds it; the others counted as the chunk that
// holds what came), answers each connection past it StatusBusy (with its
// request id) and closes it, keeps serving a client meanwhile, serves
// the frames that complete (one whole, one in chunks), and gives the
// memory back when they leave.
func TestLimits_PartialFrameCap(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const (
			limit    = 4 << 20
			frame    = 1 << 20
			sent     = 256 << 10
			attacker = 40
		)
		s := startServer(t, Options{MaxFrameSize: frame, MaxPartialBytes: limit}, NewMux())
		var peak atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if n := s.Stats().PartialBytes; n > peak.Load() {
					peak.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
		}()
		legit := dial(t, s)
		var held []*rawConn
		var counted []int64 // what each held connection counts
		var total int64     // their sum
		for i := range attacker {
			// The first frame that half of the cap holds is reserved
			// whole; the others count as the one chunk of sent bytes.
			count, whole := int64(protocol.HeaderSize+frame), true
			if total+count > limit/2 {
				count, whole = sent, false
			}
			fits := total+count <= limit
			c := dial(t, s)
			id := uint64(1000 + i)
			// A ping answered first: the server has finished its side of
			// a TLS handshake, so the frame is counted as the chunks that
			// hold it. Bytes that come while the server's handshake still
			// runs are held as ciphertext, counted with the records'
			// overhead (more than sent), and the last that fits would not.
			if f := c.request(t, protocol.CmdPing, id+1_000_000, []byte("ready")); string(f.Body) != "ready" {
				t.Fatalf("attacker %d's ping answered %q", i, f.Body)
			}
			if _, err := c.Write(append(header(id, frame), make([]byte, sent)...)); err != nil && fits {
				t.Fatal(err)
			}
			if fits {
				total += count
				waitFor(t, 5*time.Second, "the attacker's frame held", func() bool {
					return s.Stats().PartialBytes == total
				})
				if i == 0 && !whole {
					t.Fatal("the first frame was not reserved whole")
				}
				held = append(held, c)
				counted = append(counted, count)
			} else {
				f := c.readFrame(t)
				if f.Header.Status() != protocol.StatusBusy || f.Header.RequestID != id ||
					!strings.Contains(string(f.Body), "partial frames") {
					t.Fatalf("attacker %d answered %v (request %d) %q", i, f.Header.Status(), f.Header.RequestID, f.Body)
				}
				c.waitClosed(t)
			}
			if i%8 == 0 {
				if f := legit.request(t, protocol.CmdPing, uint64(i+1), []byte("still served")); string(f.Body) != "still served" {
					t.Fatalf("the legit client got %q", f.Body)
				}
			}
		}
		close(stop)
		wg.Wait()
		if p := peak.Load(); p > limit {
			t.Fatalf("partial frames held %d bytes, over the limit %d", p, limit)
		}
		if got := s.Stats().ClosedPartial; got != uint64(attacker-len(held)) {
			t.Fatalf("ClosedPartial %d, want %d", got, attacker-len(held))
		}
		if len(held) < 3 || counted[len(counted)-1] != sent {
			t.Fatalf("%d frames held, counted %v: want one whole and some in chunks", len(held), counted)
		}
		s.waitLog(t, "over MaxPartialBytes")

		// The others leave; the first (whole) and the last (in chunks)
		// finish their frames and are served, and the memory is back.
		last := len(held) - 1
		for _, c := range held[1:last] {
			c.Close()
		}
		waitFor(t, 5*time.Second, "the leavers' bytes released", func() bool {
			return s.Stats().PartialBytes == counted[0]+counted[last]
		})
		for _, c := range []*rawConn{held[0], held[last]} {
			_, _ = c.Write(make([]byte, frame-sent))
			if f := c.readFrame(t); f.Header.Status() != protocol.StatusOK || len(f.Body) != frame {
				t.Fatalf("the held attacker answered %v with %d bytes", f.Header.Status(), len(f.Body))
			}
		}
		waitFor(t, 5*time.Second, "no partial bytes", func() bool { return s.Stats().PartialBytes == 0 })

		// Connections that leave in the middle give theirs back too.
		for range 4 {
			c := dial(t, s)
			_, _ = c.Write(append(header(1, frame), make([]byte, sent)...))
			waitFor(t, 5*time.Second, "partial bytes held", func() bool { return s.Stats().PartialBytes > 0 })
			c.Close()
			waitFor(t, 5*time.Second, "partial bytes released", func() bool { return s.Stats().PartialBytes == 0 })
		}
		s.chunks.mu.Lock()
		kept := len(s.chunks.free)
		s.chunks.mu.Unlock()
		if kept > partialChunkReserve {
			t.Fatalf("%d free chunks kept mapped, over the reserve of %d", kept, partialChunkReserve)
		}
	})
}

// A small incomplete frame counts too, as its length rounded up to a
// power of two, and leaves the count when it completes.
func TestLimits_SmallPartialFrameCounts(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		s := startServer(t, Options{}, NewMux())
		c := dial(t, s)
		frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, bytes.Repeat([]byte("x"), 1000))
		c.send(t, frame[:700])
		waitFor(t, 5*time.Second, "the partial frame counted", func() bool { return s.Stats().PartialBytes == 1024 })
		c.send(t, frame[700:])
		if f := c.readFrame(t); len(f.Body) != 1000 {
			t.Fatalf("echo of %d bytes", len(f.Body))
		}
		waitFor(t, 5*time.Second, "the count released", func() bool { return s.Stats().PartialBytes == 0 })
	})
}

// TestLimits_Slowloris: a header and then nothing, and a frame trickling
// in at a few bytes a second, are closed within ReadRateWindow; a large
// frame at loopback speed and a connection without a frame in progress
// are not.
func TestLimits_Slowloris(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		// A window long enough that a busy machine (the race detector, other
		// tests) never starves the large frame's client or the server for
		// all of it.
		const window = time.Second
		s := startServer(t, Options{MinReadRate: 1000, ReadRateWindow: window, MaxFrameSize: 8 << 20}, NewMux())
		quiet := dial(t, s) // no frame in progress: not the read rate's business

		// closedAfter reports, on its channel, how long after it was
		// called c's server closed it.
		closedAfter := func(c *rawConn) <-chan time.Duration {
			ch := make(chan time.Duration, 1)
			start := time.Now()
			go func() {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, _ = io.Copy(io.Discard, c)
				ch <- time.Since(start)
			}()
			return ch
		}
		stalled := dial(t, s)
		stalled.send(t, header(1, 100))
		stalledClosed := closedAfter(stalled)
		trickle := dial(t, s)
		trickle.send(t, header(2, 100))
		trickleClosed := closedAfter(trickle)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := trickle.Write([]byte{'x'}); err != nil {
						return
					}
				}
			}
		}()

		// Meanwhile a large frame at loopback speed is served.
		big := dial(t, s)
		body := bytes.Repeat([]byte("q"), 3<<20)
		go big.Write(protocol.AppendRequest(nil, protocol.CmdPing, 3, body))
		if f := big.readFrame(t); !bytes.Equal(f.Body, body) {
			t.Fatal("the large frame's echo differs")
		}

		for _, ch := range []<-chan time.Duration{stalledClosed, trickleClosed} {
			// Within the window, give or take the sweep's period (and a
			// busy machine's delays).
			if d := <-ch; d < window-maxSweepInterval || d > window+5*time.Second {
				t.Fatalf("a slow connection was closed after %v (window %v)", d, window)
			}
		}
		s.waitLog(t, "slower than MinReadRate")
		if got := s.Stats().ClosedSlow; got != 2 {
			t.Fatalf("ClosedSlow %d, want 2", got)
		}
		if f := quiet.request(t, protocol.CmdPing, 4, []byte("here")); string(f.Body) != "here" {
			t.Fatalf("the quiet connection got %q", f.Body)
		}
	})
}

// TestLimits_Idle: a connection with nothing to do is closed after
// IdleTimeout; one that talks, or that waits for an answer, is not.
func TestLimits_Idle(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const idle = 300 * time.Millisecond
		mux := NewMux()
		mux.HandleFunc(protocol.CmdPull, func(r *Request) {
			go func() {
				time.Sleep(3 * idle)
				r.Reply(protocol.StatusOK, []byte("late"))
			}()
		})
		s := startServer(t, Options{IdleTimeout: idle}, mux)
		start := time.Now()
		silent := dial(t, s)
		waiting := dial(t, s)
		waiting.send(t, protocol.AppendRequest(nil, protocol.CmdPull, 1, nil))
		chatty := dial(t, s)

		for i := range 10 {
			if f := chatty.request(t, protocol.CmdPing, uint64(i), []byte("hi")); string(f.Body) != "hi" {
				t.Fatalf("chatty got %q", f.Body)
			}
			time.Sleep(idle / 3)
		}
		silent.waitClosed(t)
		if d := time.Since(start); d < idle-maxSweepInterval {
			t.Fatalf("the silent connection was closed after %v (IdleTimeout %v)", d, idle)
		}
		if f := waiting.readFrame(t); string(f.Body) != "late" {
			t.Fatalf("the waiting connection got %q", f.Body)
		}
		s.waitLog(t, "idle for IdleTimeout")
		waiting.waitClosed(t) // idle once answered
		if got := s.Stats().ClosedIdle; got < 2 {
			t.Fatalf("ClosedIdle %d, want at least 2", got)
		}
	})
}

func TestOptions_InsecureListener(t *testing.T) {
	a := auth.NewAuthority(nil)
	tlsConf := serverTLS(t)
	for _, tc := range []struct {
		name    string
		opts    Options
		refused bool
	}{
		{"loopback plaintext", Options{Addr: "127.0.0.1:0"}, false},
		{"all interfaces plaintext", Options{Addr: ":0"}, true},
		{"public plaintext with auth", Options{Addr: "0.0.0.0:0", Auth: a, RequireAuth: true}, true},
		{"public TLS without auth", Options{Addr: "0.0.0.0:0", TLS: tlsConf}, true},
		{"public TLS with auth", Options{Addr: "0.0.0.0:0", TLS: tlsConf, Auth: a, RequireAuth: true}, false},
		{"public insecure", Options{Addr: "0.0.0.0:0", Insecure: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if _, nerr := New(tc.opts, NewMux(), nil); (nerr == nil) != (err == nil) {
				t.Fatalf("New() = %v, Validate() = %v", nerr, err)
			}
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInsecureListener) || !strings.Contains(err.Error(), tc.opts.Addr) {
				t.Fatalf("Validate() = %v, want ErrInsecureListener naming %s", err, tc.opts.Addr)
			}
		})
	}
}

// A client that stops reading with a large answer on its way is idle once
// the answer is handed to the socket: IdleTimeout closes it (the answer
// does not keep it busy forever).
func TestLimits_IdleWhileTheClientDoesNotRead(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const idle = 300 * time.Millisecond
		mux := NewMux()
		mux.HandleFunc(protocol.CmdPull, func(r *Request) { r.Reply(protocol.StatusOK, make([]byte, 8<<20)) })
		s := startServer(t, Options{IdleTimeout: idle, MaxFrameSize: 16 << 20}, mux)
		c := dial(t, s)
		c.send(t, protocol.AppendRequest(nil, protocol.CmdPull, 1, nil))
		waitFor(t, 10*time.Second, "the stalled connection closed as idle", func() bool { return s.Stats().ClosedIdle == 1 })
		waitFor(t, 5*time.Second, "the connection forgotten", func() bool { return s.Stats().Conns == 0 })
		ping(t, s)
	})
}

// TestLimits_LargeFramesWholeAndInChunks sends large frames back to back,
// each followed by a small one, in pieces of random sizes with pauses: a
// frame that half of MaxPartialBytes holds arrives in its own buffer
// (read past gnet's), a bigger one in chunks, and every echo comes back
// in order and intact, with nothing held afterwards.
func TestLimits_LargeFramesWholeAndInChunks(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const limit = 1 << 20 // half of it holds frames up to 512 KiB whole
		s := startServer(t, Options{MaxFrameSize: 900 << 10, MaxPartialBytes: limit}, NewMux())
		rng := rand.New(rand.NewPCG(1, 2))
		var stream []byte
		var want [][]byte
		for i, n := range []int{100 << 10, 700 << 10, 300 << 10, 900 << 10, 65 << 10, 511 << 10} {
			body := make([]byte, n)
			for j := range body {
				body[j] = byte(j*7 + i)
			}
			stream = protocol.AppendRequest(stream, protocol.CmdPing, uint64(2*i+1), body)
			small := []byte(fmt.Sprintf("small %d", i))
			stream = protocol.AppendRequest(stream, protocol.CmdPing, uint64(2*i+2), small)
			want = append(want, body, small)
		}
		c := dial(t, s)
		go func() {
			for len(stream) > 0 {
				n := min(len(stream), 1+rng.IntN(300<<10))
				if _, err := c.Write(stream[:n]); err != nil {
					return
				}
				stream = stream[n:]
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
		for i, w := range want {
			f := c.readFrame(t)
			if f.Header.RequestID != uint64(i+1) || !bytes.Equal(f.Body, w) {
				t.Fatalf("echo %d: request %d, %d bytes, want request %d, %d bytes (equal %v)",
					i, f.Header.RequestID, len(f.Body), i+1, len(w), bytes.Equal(f.Body, w))
			}
		}
		waitFor(t, 5*time.Second, "no partial bytes", func() bool { return s.Stats().PartialBytes == 0 })
		if got := s.Stats().FramesChunked; got != 2 { // 700 and 900 KiB: over half the cap
			t.Fatalf("FramesChunked %d, want 2", got)
		}
	})
}
