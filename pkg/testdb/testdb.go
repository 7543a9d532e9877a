package testdb

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotInstalled: the database server's binaries were not found.
var ErrNotInstalled = errors.New("testdb: database server not installed")

// Options configure a server. The zero value suits tests.
type Options struct {
	// Fsync makes every commit wait for the disk (PostgreSQL fsync and
	// synchronous_commit on; MariaDB innodb_flush_log_at_trx_commit=1).
	// Default false: commits return before the disk has them, which is all
	// a test that kills clients, not servers, needs.
	Fsync bool
	// StartTimeout bounds the wait for the server to accept connections
	// (default 60 s).
	StartTimeout time.Duration
}

// Server is a running database server.
type Server struct {
	// Kind is "postgres" or "mariadb".
	Kind string
	// Addr is the server's TCP address, 127.0.0.1:port.
	Addr string

	dir      string
	cmd      *exec.Cmd
	out      *output
	exited   chan struct{} // closed when cmd has been waited for
	waitErr  error
	stopSig  syscall.Signal
	stopOnce sync.Once
}

// DSN returns a data source name for database on the server: a URL for
// PostgreSQL (user postgres, sslmode=disable), the go-sql-driver/mysql form
// for MariaDB (user root, no password; append "?param=value" as needed).
func (s *Server) DSN(database string) string {
	if s.Kind == "postgres" {
		return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr, database)
	}
	return fmt.Sprintf("root@tcp(%s)/%s", s.Addr, database)
}

// Dir is the directory that holds the server's data and socket.
func (s *Server) Dir() string { return s.dir }

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Output returns the server's output so far (the last megabyte at most).
func (s *Server) Output() string { return s.out.String() }

// Stop shuts the server down (fast shutdown; SIGKILL after 20 s), waits for
// it and removes its directory. It may be called more than once.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(s.stopSig)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
			err = fmt.Errorf("testdb: %s did not stop within 20 s; killed", s.Kind)
		}
		if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
			err = rmErr
		}
	})
	return err
}

// StartPostgres creates a cluster with initdb and starts postgres on it.
func StartPostgres(o Options) (*Server, error) {
	postgres, err := findPostgres()
	if err != nil {
		return nil, err
	}
	initdb := filepath.Join(filepath.Dir(postgres), "initdb")
	if _, err := os.Stat(initdb); err != nil {
		if initdb, err = exec.LookPath("initdb"); err != nil {
			return nil, fmt.Errorf("%w: initdb (next to %s or in $PATH)", ErrNotInstalled, postgres)
		}
	}
	dir, cred, err := newDir("qmq-pg-", true)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testdb: initdb: %w: %s", err, tail(string(out)))
	}
	onOff := "off"
	if o.Fsync {
		onOff = "on"
	}
	return start(o, "postgres", dir, cred, syscall.SIGINT, "database system is ready to accept connections", func(port int) []string {
		return []string{postgres, "-D", data, "-k", dir, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=" + onOff, "-c", "synchronous_commit=" + onOff,
			"-c", "full_page_writes=" + onOff, "-c", "max_connections=200", "-c", "shared_buffers=64MB"}
	})
}

// StartMariaDB creates a data directory with mariadb-install-db and starts
// mariadbd on it.
func StartMariaDB(o Options) (*Server, error) {
	mariadbd, err := findBinary("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	install, err := findBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	dir, _, err := newDir("qmq-mariadb-", false)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"}
	}
	args := append([]string{"--no-defaults"}, asRoot...)
	args = append(args, "--datadir="+data, "--auth-root-authentication-method=normal", "--skip-test-db",
		"--skip-name-resolve")
	if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testdb: %s: %w: %s", filepath.Base(install), err, tail(string(out)))
	}
	flush := "2"
	if o.Fsync {
		flush = "1"
	}
	return start(o, "mariadb", dir, nil, syscall.SIGTERM, "ready for connections", func(port int) []string {
		a := append([]string{mariadbd, "--no-defaults"}, asRoot...)
		return append(a, "--datadir="+data, "--socket="+filepath.Join(dir, "mysqld.sock"),
			"--port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--pid-file="+filepath.Join(dir, "mysqld.pid"),
			"--tmpdir="+dir, "--skip-name-resolve", "--skip-log-bin", "--max-connections=200",
			"--innodb-buffer-pool-size=64M", "--innodb-log-file-size=32M", "--innodb-flush-log-at-trx-commit="+flush)
	})
}

// start runs the server built by argv on a free port, trying three ports
// when one is taken between the probe and the server's listen, and waits
// for ready in its output.
func start(o Options, kind, dir string, cred *syscall.Credential, stopSig syscall.Signal, ready string,
	argv func(port int) []string) (*Server, error) {
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		a := argv(port)
		s := &Server{Kind: kind, Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, out: newOutput(ready),
			exited: make(chan struct{}), stopSig: stopSig}
		s.cmd = exec.Command(a[0], a[1:]...)
		s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
		s.cmd.SysProcAttr = sysProcAttr(cred)
		if err := s.cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("testdb: start %s: %w", kind, err)
		}
		go func() { s.waitErr = s.cmd.Wait(); close(s.exited) }()
		select {
		case <-s.out.ready:
			return s, nil
		case <-s.exited:
			lastErr = fmt.Errorf("testdb: %s exited (%v): %s", kind, s.waitErr, tail(s.out.String()))
			if !strings.Contains(strings.ToLower(s.out.String()), "address already in use") {
				os.RemoveAll(dir)
				return nil, lastErr
			}
		case <-time.After(timeout):
			s.cmd.Process.Kill()
			<-s.exited
			os.RemoveAll(dir)
			return nil, fmt.Errorf("testdb: %s not ready after %v: %s", kind, timeout, tail(s.out.String()))
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// newDir makes the server's directory under the system's temporary
// directory. With dropRoot and the caller root, the directory is given to
// an unprivileged user and the credential to run as is returned.
func newDir(prefix string, dropRoot bool) (string, *syscall.Credential, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if !dropRoot || os.Geteuid() != 0 {
		return dir, nil, nil
	}
	var u *user.User
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if u == nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("testdb: running as root and no postgres or nobody user to run the server as")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// findPostgres returns the path of the postgres binary.
func findPostgres() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(found) == 0 {
		return "", fmt.Errorf("%w: postgres (install Debian's postgresql)", ErrNotInstalled)
	}
	sort.Slice(found, func(i, j int) bool { return versionOf(found[i]) > versionOf(found[j]) })
	return found[0], nil
}

// versionOf reads the major version out of /usr/lib/postgresql/N/bin/postgres.
func versionOf(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// findBinary returns the first of names found in $PATH, /usr/sbin or /usr/bin.
func findBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/bin"} {
			if p := filepath.Join(d, n); isExecutable(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s (install Debian's mariadb-server)", ErrNotInstalled, strings.Join(names, " or "))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// output keeps a server's output (its last megabyte) and closes ready once
// the marker line has appeared.
type output struct {
	mu     sync.Mutex
	b      []byte
	marker string
	seen   bool
	ready  chan struct{}
}

func newOutput(marker string) *output { return &output{marker: marker, ready: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b = append(o.b, p...)
	if len(o.b) > 1<<20 {
		o.b = append(o.b[:0], o.b[len(o.b)-1<<19:]...)
	}
	if !o.seen && strings.Contains(string(o.b), o.marker) {
		o.seen = true
		close(o.ready)
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.b)
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}
