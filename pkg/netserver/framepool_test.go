package netserver

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Every frame size up to framePoolMaxFrame has a class whose buffer holds
// it and wastes under a fifth of it (64 KiB for smaller frames); classes
// grow with their index.
func TestFramePool_Classes(t *testing.T) {
	for c := 1; c < framePoolClasses; c++ {
		if classSize(c) <= classSize(c-1) {
			t.Fatalf("class %d: %d bytes, not above class %d's %d", c, classSize(c), c-1, classSize(c-1))
		}
	}
	if got := classSize(framePoolClasses - 1); got != framePoolMaxFrame {
		t.Fatalf("the largest class holds %d bytes, want framePoolMaxFrame %d", got, framePoolMaxFrame)
	}
	for _, n := range []int{1, 1000, 64 << 10, 64<<10 + 1, 80 << 10, 80<<10 + 1, 100_000, 128 << 10, 128<<10 + 1,
		282_000, 1 << 20, 1<<20 + 1, 3_000_000, framePoolMaxFrame - 1, framePoolMaxFrame} {
		c := frameClass(n)
		size := classSize(c)
		if size < n {
			t.Fatalf("frame of %d bytes: class %d of %d bytes is too small", n, c, size)
		}
		if n > framePoolMinClass && 5*(size-n) >= size {
			t.Fatalf("frame of %d bytes: class %d of %d bytes wastes a fifth or more", n, c, size)
		}
		if c > 0 && classSize(c-1) >= n {
			t.Fatalf("frame of %d bytes: class %d of %d bytes, but class %d (%d) would hold it", n, c, size, c-1, classSize(c-1))
		}
	}
}

// The pool keeps idle buffers up to its bound and no more, reuses the most
// recently given back first, and leaves frames over framePoolMaxFrame (or
// every frame, when off) to the garbage collector.
func TestFramePool_Bound(t *testing.T) {
	var p framePool
	const size = 300 << 10 // class of 320 KiB
	class := int64(classSize(frameClass(size)))
	p.init(3*class+class/2, false)
	var bufs []*frameBuf
	for range 5 {
		f := p.get(size)
		if len(f.b) != size || f.class != frameClass(size) {
			t.Fatalf("get(%d): %d bytes, class %d", size, len(f.b), f.class)
		}
		bufs = append(bufs, f)
	}
	for _, f := range bufs {
		p.put(f)
	}
	if bytes, reused, made := p.stats(); bytes != 3*class || reused != 0 || made != 5 {
		t.Fatalf("after 5 buffers back: %d idle bytes, %d reused, %d made; want %d, 0, 5", bytes, reused, made, 3*class)
	}
	f := p.get(size - 1000)
	if f != bufs[2] || len(f.b) != size-1000 {
		t.Fatal("get did not reuse the last buffer kept")
	}
	if bytes, reused, _ := p.stats(); bytes != 2*class || reused != 1 {
		t.Fatalf("after one reuse: %d idle bytes, %d reused", bytes, reused)
	}

	big := p.get(framePoolMaxFrame + 1)
	if big.class != -1 || len(big.b) != framePoolMaxFrame+1 {
		t.Fatalf("a frame over framePoolMaxFrame: class %d, %d bytes", big.class, len(big.b))
	}
	p.put(big)
	if bytes, _, _ := p.stats(); bytes != 2*class {
		t.Fatalf("a buffer over framePoolMaxFrame was kept: %d idle bytes", bytes)
	}

	var off framePool
	off.init(-1, false)
	g := off.get(size)
	off.put(g)
	if bytes, reused, made := off.stats(); bytes != 0 || reused != 0 || made != 1 || g.class != -1 {
		t.Fatalf("a pool that is off kept %d bytes (%d reused, %d made, class %d)", bytes, reused, made, g.class)
	}
}

// The sweep's trim empties a pool that no frame took from since the last
// trim, and keeps one in use.
func TestFramePool_TrimWhenIdle(t *testing.T) {
	var p framePool
	p.init(DefaultFramePoolBytes, false)
	p.put(p.get(100 << 10))
	p.trim() // a buffer was taken since the last look: kept
	if bytes, _, _ := p.stats(); bytes == 0 {
		t.Fatal("trim emptied a pool in use")
	}
	p.trim()
	if bytes, _, _ := p.stats(); bytes != 0 {
		t.Fatalf("trim left %d idle bytes after a period without frames", bytes)
	}
}

// Release poisons the buffer in test binaries, so that a slice kept past
// it reads poisonByte.
func TestFramePool_PoisonsInTests(t *testing.T) {
	var p framePool
	p.init(DefaultFramePoolBytes, testing.Testing())
	f := p.get(70 << 10)
	for i := range f.b {
		f.b[i] = 'x'
	}
	kept := f.b[1000:2000]
	p.put(f)
	if want := bytes.Repeat([]byte{poisonByte}, len(kept)); !bytes.Equal(kept, want) {
		t.Fatal("a released buffer was not poisoned")
	}
}

func TestOptions_FramePoolBytes(t *testing.T) {
	if err := (Options{FramePoolBytes: 1000}).Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("FramePoolBytes under one buffer: %v, want ErrInvalidOptions", err)
	}
	for _, n := range []int64{-1, 0, framePoolMinClass, 1 << 30} {
		if err := (Options{FramePoolBytes: n}).Validate(); err != nil {
			t.Fatalf("FramePoolBytes %d: %v", n, err)
		}
	}
	if got := (Options{}).withDefaults().FramePoolBytes; got != DefaultFramePoolBytes {
		t.Fatalf("default FramePoolBytes %d, want %d", got, DefaultFramePoolBytes)
	}
}

// largeBody is a body that makes its frame larger than ReadBufferSize.
func largeBody(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// A handler served off the loop releases a large body: the buffer goes to
// the pool (a second Release changes nothing) and the next large frame
// reuses it, its body intact; a small body's Release does nothing.
func TestRequest_ReleaseLargeBody(t *testing.T) {
	type seen struct {
		body     []byte
		released []byte // the body's bytes, read again after Release
		nilBody  bool
	}
	got := make(chan seen, 4)
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) {
		body := r.Body
		sn := seen{body: append([]byte(nil), body...)}
		r.Release()
		r.Release() // idempotent
		sn.nilBody = r.Body == nil
		// A use after Release, on purpose: the buffer is not reused
		// before the reply lets the client send the next frame.
		sn.released = append([]byte(nil), body...)
		got <- sn
		r.Reply(protocol.StatusOK, []byte("ok"))
	})
	s := startServer(t, Options{}, mux)
	c := dial(t, s)

	small := []byte("small body")
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, small))
	c.readFrame(t)
	sn := <-got
	if !bytes.Equal(sn.body, small) || !bytes.Equal(sn.released, small) || sn.nilBody {
		t.Fatalf("a small body changed on Release: %q then %q (Body nil: %v)", sn.body, sn.released, sn.nilBody)
	}
	if st := s.Stats(); st.FramePoolBytes != 0 || st.FramesMade != 0 {
		t.Fatalf("a small request touched the frame pool: %+v", st)
	}

	const n = 200 << 10
	class := int64(classSize(frameClass(protocol.HeaderSize + n)))
	for i := range 3 {
		body := largeBody(n, byte(i))
		c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, uint64(2+i), body))
		if f := c.readFrame(t); f.Header.Status() != protocol.StatusOK {
			t.Fatalf("large request %d answered %v", i, f.Header.Status())
		}
		sn := <-got
		if !bytes.Equal(sn.body, body) {
			t.Fatalf("large request %d: the handler saw a different body", i)
		}
		if !sn.nilBody {
			t.Fatalf("large request %d: Body not nil after Release", i)
		}
		if bytes.Equal(sn.released, body) || sn.released[0] != poisonByte {
			t.Fatalf("large request %d: the body was not poisoned on Release", i)
		}
		st := s.Stats()
		if st.FramePoolBytes != class || st.FramesMade != 1 || st.FramesReused != uint64(i) {
			t.Fatalf("after large request %d: pool %d bytes, %d made, %d reused; want %d, 1, %d",
				i, st.FramePoolBytes, st.FramesMade, st.FramesReused, class, i)
		}
	}
}

// An inline handler detaches a large request: the detached request owns
// the buffer (the inline one's Release does nothing), and its Release,
// from another goroutine after the reply, gives it back.
func TestRequest_DetachThenRelease(t *testing.T) {
	released := make(chan struct{}, 4)
	mux := NewMux()
	mux.HandleInline(protocol.CmdSend, HandlerFunc(func(r *Request) {
		d := r.Detach()
		r.Release() // not the owner any more
		if r.Body == nil {
			panic("the inline request's Release took the body the detached one owns")
		}
		go func() {
			d.Reply(protocol.StatusOK, d.Body[:16])
			d.Release()
			d.Release()
			released <- struct{}{}
		}()
	}))
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	const n = 100 << 10
	class := int64(classSize(frameClass(protocol.HeaderSize + n)))
	for i := range 2 {
		body := largeBody(n, byte(10+i))
		c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, uint64(i), body))
		if f := c.readFrame(t); !bytes.Equal(f.Body, body[:16]) {
			t.Fatalf("detached request %d answered %q, want its body's start", i, f.Body)
		}
		<-released
		if st := s.Stats(); st.FramePoolBytes != class || st.FramesMade != 1 || st.FramesReused != uint64(i) {
			t.Fatalf("after detached request %d: pool %d bytes, %d made, %d reused", i, st.FramePoolBytes, st.FramesMade, st.FramesReused)
		}
	}
	// A small detached request owns a copy: its Release gives nothing.
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 9, largeBody(100, 1)))
	c.readFrame(t)
	<-released
	if st := s.Stats(); st.FramePoolBytes != class || st.FramesMade != 1 {
		t.Fatalf("a small detached request's Release changed the pool: %+v", st)
	}
}

// A handler that never calls Release leaves each large frame its own new
// buffer (the garbage collector's), as before the pool.
func TestRequest_NoReleaseNoReuse(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) { r.Reply(protocol.StatusOK, r.Body[:4]) })
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	for i := range 3 {
		body := largeBody(90<<10, byte(i))
		c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, uint64(i), body))
		if f := c.readFrame(t); !bytes.Equal(f.Body, body[:4]) {
			t.Fatalf("request %d answered %q", i, f.Body)
		}
	}
	if st := s.Stats(); st.FramePoolBytes != 0 || st.FramesMade != 3 || st.FramesReused != 0 {
		t.Fatalf("without Release: %+v", st)
	}
}

// A large frame refused on the loop (too many in flight) gives its buffer
// back to the pool at once.
func TestFramePool_RefusedFrameGoesBack(t *testing.T) {
	release := make(chan struct{})
	h := HandlerFunc(func(r *Request) {
		go func() {
			<-release
			r.Reply(protocol.StatusOK)
		}()
	})
	s := startServer(t, Options{MaxInFlight: 1}, h)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, largeBody(100<<10, 1))) // held, not released
	waitFor(t, 5*time.Second, "the first request in flight", func() bool { return s.Stats().InFlight == 1 })
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 2, largeBody(100<<10, 2)))
	if f := c.readFrame(t); f.Header.RequestID != 2 || f.Header.Status() != protocol.StatusBusy {
		t.Fatalf("second request answered %+v", f.Header)
	}
	class := int64(classSize(frameClass(protocol.HeaderSize + 100<<10)))
	if st := s.Stats(); st.FramePoolBytes != class || st.FramesMade != 2 {
		t.Fatalf("after a refused large frame: pool %d bytes, %d made; want %d, 2", st.FramePoolBytes, st.FramesMade, class)
	}
	close(release)
	c.readFrame(t)
}
