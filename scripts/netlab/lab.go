package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// nsPrefix starts every namespace a lab makes.
	nsPrefix = "qnl"
	// ownerDir holds one <N>.pid file per lab: its owner's pid.
	ownerDir = "/run/qmq-netlab"
	// maxLabs bounds a lab's number N (the third byte of 10.213.N.0/24).
	maxLabs = 250
	// maxHosts bounds the hosts of one lab (addresses .1 to .maxHosts).
	maxHosts = 200
)

var (
	hostName  = regexp.MustCompile(`^[a-z0-9]{1,8}$`)
	labNSName = regexp.MustCompile(`^` + nsPrefix + `([0-9]+)-`)
)

// Host is one namespace of a lab.
type Host struct {
	// Name is the host's name in the lab.
	Name string
	// NS is its network namespace's name (ip netns).
	NS string
	// Addr is its address on the lab's network.
	Addr  netip.Addr
	index int
}

// Lab is a set of hosts on one bridge. Its methods may be called from
// several goroutines.
type Lab struct {
	id       int
	switchNS string // the switch namespace
	hosts    map[string]*Host
	order    []*Host

	mu     sync.Mutex
	closed bool
	cuts   map[[2]string]bool // from, to
	slow   map[string]*slowLink
}

// New makes a lab with the given hosts (names [a-z0-9]{1,8}, distinct),
// after removing what crashed earlier runs left. Close it.
func New(hosts ...string) (*Lab, error) {
	if len(hosts) == 0 || len(hosts) > maxHosts {
		return nil, fmt.Errorf("netlab: %d hosts (want 1 to %d)", len(hosts), maxHosts)
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if !hostName.MatchString(h) || h == "sw" || seen[h] {
			return nil, fmt.Errorf("netlab: bad or repeated host name %q", h)
		}
		seen[h] = true
	}
	if err := Supported(); err != nil {
		return nil, err
	}
	id, err := claimLab()
	if err != nil {
		return nil, err
	}
	l := &Lab{
		id:       id,
		switchNS: fmt.Sprintf("%s%d-sw", nsPrefix, id),
		hosts:    map[string]*Host{},
		cuts:     map[[2]string]bool{},
		slow:     map[string]*slowLink{},
	}
	for i, name := range hosts {
		h := &Host{Name: name, NS: fmt.Sprintf("%s%d-%s", nsPrefix, id, name),
			Addr: netip.AddrFrom4([4]byte{10, 213, byte(id), byte(i + 1)}), index: i + 1}
		l.hosts[name] = h
		l.order = append(l.order, h)
	}
	if err := l.build(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// build makes the switch, the hosts and their links.
func (l *Lab) build() error {
	if err := ip("netns", "add", l.switchNS); err != nil {
		return err
	}
	if err := ipIn(l.switchNS, "link", "set", "lo", "up"); err != nil {
		return err
	}
	if err := ipIn(l.switchNS, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := ipIn(l.switchNS, "link", "set", "br0", "up"); err != nil {
		return err
	}
	for _, h := range l.order {
		port := l.port(h)
		steps := [][]string{
			{"netns", "add", h.NS},
			{"link", "add", "eth0", "netns", h.NS, "type", "veth", "peer", "name", port, "netns", l.switchNS},
			{"-n", l.switchNS, "link", "set", port, "master", "br0"},
			{"-n", l.switchNS, "link", "set", port, "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", h.NS, "addr", "add", h.Addr.String() + "/24", "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
		}
		for _, s := range steps {
			if err := ip(s...); err != nil {
				return err
			}
		}
	}
	return nil
}

// port is the switch-side name of h's link.
func (l *Lab) port(h *Host) string { return fmt.Sprintf("q%ds%d", l.id, h.index) }

// Host returns the named host, nil if the lab has none.
func (l *Lab) Host(name string) *Host { return l.hosts[name] }

// Hosts returns the lab's hosts in the order New got them.
func (l *Lab) Hosts() []*Host { return append([]*Host(nil), l.order...) }

func (l *Lab) host(name string) (*Host, error) {
	h := l.hosts[name]
	if h == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownHost, name)
	}
	return h, nil
}

// Command returns a command that runs name with args in host's namespace
// (through ip netns exec: its pid is the program's own).
func (l *Lab) Command(host, name string, args ...string) (*exec.Cmd, error) {
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...), nil
}

// Close stops every forwarder, kills what still runs in the lab's
// namespaces and deletes them. It is safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	slow := l.slow
	l.slow = map[string]*slowLink{}
	l.mu.Unlock()
	for _, s := range slow {
		s.stop()
	}
	err := removeLab(l.id)
	os.Remove(ownerFile(l.id))
	return err
}

// Supported reports, with an error wrapping ErrUnsupported, why this
// machine cannot make a lab.
func Supported() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root", ErrUnsupported)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no ip command: %v", ErrUnsupported, err)
	}
	probe := fmt.Sprintf("%sprobe%d", nsPrefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns add: %v: %s", ErrUnsupported, err, strings.TrimSpace(string(out)))
	}
	defer exec.Command("ip", "netns", "del", probe).Run()
	if out, err := exec.Command("ip", "-n", probe, "link", "add", "br0", "type", "bridge").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: bridge: %v: %s", ErrUnsupported, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: veth: %v: %s", ErrUnsupported, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ownerFile(id int) string { return filepath.Join(ownerDir, strconv.Itoa(id)+".pid") }

// claimLab removes labs whose owners are gone and takes the lowest free
// number, under a lock shared by every process using netlab.
func claimLab() (int, error) {
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		return 0, err
	}
	lock, err := os.OpenFile(filepath.Join(ownerDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, id := range existingLabs() {
		if ownerAlive(id) {
			used[id] = true
			continue
		}
		removeLab(id) // a crashed run's
		os.Remove(ownerFile(id))
	}
	for id := 1; id <= maxLabs; id++ {
		if used[id] {
			continue
		}
		if _, err := os.Stat(ownerFile(id)); err == nil && ownerAlive(id) {
			continue
		}
		if err := os.WriteFile(ownerFile(id), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return 0, err
		}
		return id, nil
	}
	return 0, errors.New("netlab: every lab number is taken")
}

// existingLabs lists the numbers of the labs that have namespaces.
func existingLabs() []int {
	entries, _ := os.ReadDir("/run/netns")
	seen := map[int]bool{}
	var ids []int
	for _, e := range entries {
		m := labNSName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		id, err := strconv.Atoi(m[1])
		if err == nil && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// ownerAlive reports whether lab id's owner still runs.
func ownerAlive(id int) bool {
	b, err := os.ReadFile(ownerFile(id))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM)
}

// removeLab kills every process in lab id's namespaces (they were started
// in them by its owner) and deletes them.
func removeLab(id int) error {
	prefix := fmt.Sprintf("%s%d-", nsPrefix, id)
	entries, _ := os.ReadDir("/run/netns")
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		out, _ := exec.Command("ip", "netns", "pids", e.Name()).Output()
		for _, f := range strings.Fields(string(out)) {
			// Not ourselves: our main thread may sit in a namespace (a
			// goroutine locked to it by inNamespace ended there).
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := ip("netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ip runs the ip command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ipIn runs the ip command in namespace ns.
func ipIn(ns string, args ...string) error { return ip(append([]string{"-n", ns}, args...)...) }
