// Package exposure holds the rule every QMQ-Go listener follows before it
// listens: a port reachable from other machines needs TLS and required
// authentication, unless the operator says otherwise (--insecure). It is a
// leaf: the TCP server (pkg/netserver), the operations HTTP server
// (pkg/opsserver) and the meta server's HTTP API call the same Check.
//
// An address is loopback when its host is an IP literal in 127.0.0.0/8 or
// ::1, or the name "localhost". Names are not resolved (a name could
// resolve differently later), so any other name counts as reachable, and so
// does an empty host (":20881", every interface).
package exposure

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrInsecureListener: a listener on a non-loopback address lacks TLS or
// required authentication and was not marked insecure. The message names
// the address and what is missing.
var ErrInsecureListener = errors.New("insecure listener")

// Check returns nil when a listener on addr (host:port) may start: addr is
// loopback, or it has both TLS and required authentication, or insecure is
// set. Otherwise it returns an error wrapping ErrInsecureListener.
func Check(addr string, tlsOn, authOn, insecure bool) error {
	if insecure || (tlsOn && authOn) || IsLoopback(addr) {
		return nil
	}
	var missing []string
	if !tlsOn {
		missing = append(missing, "TLS")
	}
	if !authOn {
		missing = append(missing, "required authentication")
	}
	return fmt.Errorf("%w: %s is not a loopback address and has no %s (configure them, or mark the listener insecure to listen anyway)",
		ErrInsecureListener, addr, strings.Join(missing, " and no "))
}

// IsLoopback reports whether addr (host:port, or a bare host) names only
// the loopback interface.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // a zone: fe80::1%eth0
		host = host[:i]
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
