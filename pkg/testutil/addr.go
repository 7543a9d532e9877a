package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// lowestReusablePort is the bottom of the range ReusableAddr draws from.
const lowestReusablePort = 10000

// ReusableAddr returns a loopback address, "127.0.0.1:port", for a test
// that must start a server on a known address, or stop one and start
// another on the same address (a restart, an outage). The port was free a
// moment ago and lies below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), which is where a socket bound to port 0
// and every outgoing connection get theirs: between the probe and the
// test's own listen, and across a restart, nothing else on the machine is
// handed the port by the kernel (only a process choosing it by number could
// take it). Ports are drawn at random and probed with a listen, and a port
// is handed out once per process: two calls in a row could draw the same
// free port (a test gave a child's server and its HTTP server both one
// port, and the second listen failed).
func ReusableAddr(t testing.TB) string {
	t.Helper()
	low := ephemeralLow()
	if low-lowestReusablePort < 1000 {
		return probe(t, 0) // no room below the ephemeral range: any free port
	}
	for range 200 {
		port := lowestReusablePort + rand.IntN(low-lowestReusablePort)
		if !claimPort(port) {
			continue // handed out before
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	t.Fatalf("no free port between %d and %d after 200 tries", lowestReusablePort, low)
	return ""
}

// handedOut are the ports ReusableAddr has returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// claimPort reports whether port was not handed out before, and marks it.
func claimPort(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[port] {
		return false
	}
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	handedOut.ports[port] = true
	return true
}

// probe returns the address of a listen on port (0: the kernel's choice),
// closed again.
func probe(t testing.TB, port int) string {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768,
// Linux's default, when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}
