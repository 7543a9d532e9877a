package netlab

import (
	"fmt"
	"sort"
)

// nowhere is the MAC address a cut host's frames are sent to: no interface
// of the lab has it, so the bridge floods them and every host drops them.
const nowhere = "02:00:00:00:de:ad"

// Cut drops, silently, every frame from sends to to (one way). Frames from
// to still reach from.
func (l *Lab) Cut(from, to string) error {
	f, err := l.host(from)
	if err != nil {
		return err
	}
	t, err := l.host(to)
	if err != nil {
		return err
	}
	if f == t {
		return fmt.Errorf("netlab: cut %s from itself", from)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if err := ipIn(f.NS, "neigh", "replace", t.Addr.String(), "lladdr", nowhere, "dev", "eth0", "nud", "permanent"); err != nil {
		return err
	}
	l.cuts[[2]string{from, to}] = true
	return nil
}

// CutBoth cuts a from b and b from a.
func (l *Lab) CutBoth(a, b string) error {
	if err := l.Cut(a, b); err != nil {
		return err
	}
	return l.Cut(b, a)
}

// Heal undoes the cuts between a and b, both ways.
func (l *Lab) Heal(a, b string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	for _, pair := range [][2]string{{a, b}, {b, a}} {
		if err := l.healLocked(pair); err != nil {
			return err
		}
	}
	return nil
}

// HealAll undoes every cut.
func (l *Lab) HealAll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	for pair := range l.cuts {
		if err := l.healLocked(pair); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) healLocked(pair [2]string) error {
	if !l.cuts[pair] {
		return nil
	}
	f, t := l.hosts[pair[0]], l.hosts[pair[1]]
	// The next frame resolves t's address again.
	if err := ipIn(f.NS, "neigh", "del", t.Addr.String(), "dev", "eth0"); err != nil {
		return err
	}
	delete(l.cuts, pair)
	return nil
}

// Cuts lists the cuts in place as "from>to", sorted.
func (l *Lab) Cuts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for pair := range l.cuts {
		out = append(out, pair[0]+">"+pair[1])
	}
	sort.Strings(out)
	return out
}

// Isolate takes host's switch port down (down true) or up again: the host
// reaches nobody and nobody reaches it.
func (l *Lab) Isolate(host string, down bool) error {
	h, err := l.host(host)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	state := "up"
	if down {
		state = "down"
	}
	return ipIn(l.switchNS, "link", "set", l.port(h), state)
}
