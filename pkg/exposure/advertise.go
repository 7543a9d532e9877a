package exposure

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrNoAdvertiseAddr is returned when a server that registers its address
// listens on all interfaces (0.0.0.0, [::], or no host) and was not told
// which address others reach it at: registering the wildcard would send
// every client to its own host.
var ErrNoAdvertiseAddr = errors.New("no advertise address")

// IsWildcard reports whether addr (host:port or a host) listens on all
// interfaces: an empty host, 0.0.0.0 or ::.
func IsWildcard(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// CheckAdvertise checks the address a server registers: advertise (from
// flag, named in the error) when given, else listen. The registered
// address must name a host (not a wildcard) and a port other than 0
// unless the listener's own port is 0 and nothing is advertised (tests
// listening on a free loopback port).
func CheckAdvertise(listen, advertise, flag string) error {
	if advertise == "" {
		if IsWildcard(listen) {
			_, port, err := net.SplitHostPort(listen)
			if err != nil || port == "" {
				port = "PORT"
			}
			return fmt.Errorf("%w: %s listens on all interfaces; give the address others reach this server at with %s (e.g. %s 10.0.0.12:%s)",
				ErrNoAdvertiseAddr, listen, flag, flag, port)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrNoAdvertiseAddr, flag, advertise, err)
	}
	if IsWildcard(host) || port == "" || port == "0" {
		return fmt.Errorf("%w: %s %q is not an address others can reach (a host and a port)", ErrNoAdvertiseAddr, flag, advertise)
	}
	return nil
}

// Reachable is the address at which a listener bound to bound is reached
// when its server advertises advertise: bound itself unless bound is a
// wildcard, else the advertised host with bound's port.
func Reachable(bound, advertise string) string {
	if !IsWildcard(bound) || advertise == "" {
		return bound
	}
	host, _, err := net.SplitHostPort(advertise)
	if err != nil {
		return bound
	}
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	return net.JoinHostPort(host, port)
}
