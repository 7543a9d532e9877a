package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// newLab makes a lab or skips the test where namespaces are refused.
func newLab(t *testing.T, hosts ...string) *Lab {
	t.Helper()
	l, err := New(hosts...)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, h := range l.Hosts() {
			if _, err := os.Stat("/run/netns/" + h.NS); err == nil {
				t.Errorf("namespace %s left after Close", h.NS)
			}
		}
	})
	return l
}

// echoServer answers each line it reads on a connection with the same line.
func echoServer(t *testing.T, l *Lab, host string) string {
	t.Helper()
	addr := l.Host(host).Addr.String() + ":7000"
	ln, err := l.Listen(host, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return addr
}

// roundTrip writes a line on c and waits up to timeout for it to come back.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintln(c, line); err != nil {
		return err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != line {
		return fmt.Errorf("echo %q, want %q", got, line)
	}
	return nil
}

func dial(t *testing.T, l *Lab, from, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.DialContext(ctx, from, "tcp", addr)
}

func TestCutAndHeal(t *testing.T) {
	l := newLab(t, "a", "b", "c")
	addr := echoServer(t, l, "b")
	c, err := dial(t, l, "a", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := l.CutBoth("a", "b"); err != nil {
		t.Fatal(err)
	}
	// Silent: the write succeeds, the answer never comes, a new dial
	// times out rather than being refused.
	err = roundTrip(c, r, "during", 500*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("round trip across a cut: %v, want a timeout", err)
	}
	if _, err := dial(t, l, "a", addr, 500*time.Millisecond); err == nil || !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("dial across a cut: %v, want a timeout", err)
	}
	// Others still reach b.
	cc, err := dial(t, l, "c", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("c to b during a cut of a: %v", err)
	}
	if err := roundTrip(cc, bufio.NewReader(cc), "from c", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	if got := l.Cuts(); len(got) != 2 {
		t.Fatalf("cuts %v", got)
	}

	if err := l.Heal("a", "b"); err != nil {
		t.Fatal(err)
	}
	if got := l.Cuts(); len(got) != 0 {
		t.Fatalf("cuts after heal %v", got)
	}
	// The held connection delivers its line once TCP retransmits it.
	c.SetDeadline(time.Now().Add(30 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(got) != "during" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	c2, err := dial(t, l, "a", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial after heal: %v", err)
	}
	defer c2.Close()
	if err := roundTrip(c2, bufio.NewReader(c2), "after", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestOneWayCut(t *testing.T) {
	l := newLab(t, "a", "b")
	pa, err := l.ListenPacket("a", "udp", l.Host("a").Addr.String()+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	pb, err := l.ListenPacket("b", "udp", l.Host("b").Addr.String()+":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	if err := l.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	// b → a arrives (poll: the first datagram may wait for ARP).
	got := make(chan string, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := pa.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case m := <-got:
			if m != "b>a" {
				t.Fatalf("a got %q", m)
			}
			break wait
		case <-tick.C:
			pb.WriteTo([]byte("b>a"), pa.LocalAddr())
		case <-deadline:
			t.Fatal("b's datagrams do not reach a across a cut of a from b")
		}
	}
	// a → b does not.
	for range 5 {
		if _, err := pa.WriteTo([]byte("a>b"), pb.LocalAddr()); err != nil {
			t.Fatalf("send across a cut must not fail: %v", err)
		}
	}
	pb.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 64)
	for {
		n, _, err := pb.ReadFrom(buf)
		if err != nil {
			break
		}
		if string(buf[:n]) == "a>b" {
			t.Fatal("a's datagram reached b across a cut")
		}
	}
}

func TestSlowLink(t *testing.T) {
	l := newLab(t, "a", "b")
	addr := echoServer(t, l, "b")
	c, err := dial(t, l, "a", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	rtt := func() time.Duration {
		t.Helper()
		start := time.Now()
		if err := roundTrip(c, r, "ping", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	if err := l.Slow("b", 100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	// Both directions delayed: at least 200 ms a round trip.
	for range 3 {
		if d := rtt(); d < 200*time.Millisecond {
			t.Fatalf("round trip %v through a 100 ms link, want ≥ 200 ms", d)
		}
	}
	st, err := l.Unslow("b")
	if err != nil {
		t.Fatal(err)
	}
	if st.Forwarded == 0 {
		t.Fatalf("forwarder stats %+v", st)
	}
	// Lossy: with a quarter of the frames dropped, TCP still gets through,
	// and the forwarder counts drops. (At half, a run of drops of one
	// segment backs TCP's retransmission off past the round trip's 30 s
	// now and then; at a quarter ten round trips of two or more frames each
	// drop one with near certainty.)
	if err := l.Slow("b", 0, 0.25); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		rtt()
	}
	st, err = l.Unslow("b")
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped == 0 {
		t.Fatalf("no frame dropped at 25%% loss: %+v", st)
	}
	if d := rtt(); d > time.Second {
		t.Fatalf("round trip %v after Unslow", d)
	}
}

func TestStaleLabRemoved(t *testing.T) {
	l := newLab(t, "a")
	// Pretend its owner crashed: a dead pid in its owner file.
	if err := os.WriteFile(ownerFile(l.id), []byte("999999999"), 0o644); err != nil {
		t.Fatal(err)
	}
	l2 := newLab(t, "z")
	if _, err := os.Stat("/run/netns/" + l.Host("a").NS); !os.IsNotExist(err) {
		t.Fatalf("stale lab's namespace %s still there (%v)", l.Host("a").NS, err)
	}
	if l2.id != l.id {
		t.Logf("new lab got number %d (stale was %d)", l2.id, l.id)
	}
}

func TestIsolate(t *testing.T) {
	l := newLab(t, "a", "b")
	addr := echoServer(t, l, "b")
	if err := l.Isolate("b", true); err != nil {
		t.Fatal(err)
	}
	if c, err := dial(t, l, "a", addr, 500*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("dialled an isolated host")
	}
	if err := l.Isolate("b", false); err != nil {
		t.Fatal(err)
	}
	// The port comes back up (poll: the bridge may take a moment).
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := dial(t, l, "a", addr, time.Second)
		if err == nil {
			err = roundTrip(c, bufio.NewReader(c), "back", 5*time.Second)
			c.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("b unreachable after Isolate(false): %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
