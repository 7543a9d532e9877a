package testutil

import (
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckFor(t *testing.T) {
	var n atomic.Int32
	CheckFor(t, time.Second, time.Millisecond, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n.Load() != 3 {
		t.Fatalf("fn called %d times", n.Load())
	}
	Eventually(t, time.Second, "counter", func() bool { return n.Add(1) > 5 })
}

// ReusableAddr gives a listenable loopback port below the ephemeral range.
func TestReusableAddr(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		addr := ReusableAddr(t)
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q: %v", addr, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			t.Fatal(err)
		}
		if low-lowestReusablePort >= 1000 && (port < lowestReusablePort || port >= low) {
			t.Fatalf("port %d outside [%d, %d)", port, lowestReusablePort, low)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		ln.Close()
	}
}

// ReusableAddr never hands out one port twice: drawn at random, 2,000
// draws from ~20,000 free ports would repeat one almost surely.
func TestReusableAddr_NeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		a := ReusableAddr(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}
