package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// checkInterval is how often a source looks at its files at most.
const checkInterval = time.Second

// Option changes how a config built by Server or Client reloads.
type Option func(*source)

// OnReloadError sets a function told when changed files could not be used
// (the old certificate and pool stay in use): once per error, not on every
// check, from a handshake's goroutine, so it must be quick. Servers log
// and count it. Default: nothing is told.
func OnReloadError(fn func(error)) Option { return func(s *source) { s.onError = fn } }

// withCheckInterval replaces checkInterval (tests).
func withCheckInterval(d time.Duration) Option { return func(s *source) { s.interval = d } }

// stamp is what a check compares to decide that a file changed.
type stamp struct {
	modTime int64 // unix nanoseconds
	size    int64
}

// stamps are the stamps of CA, Cert and Key, in that order (zero for a
// file not named).
type stamps [3]stamp

// material is what one reading of the files produced; it never changes.
type material struct {
	stamps stamps
	cert   *tls.Certificate // nil without Cert
	pool   *x509.CertPool   // nil without CA
	server *tls.Config      // the server's config for this material (Server only)
}

// source holds the material read last and reads the files again when they
// change (doc.go, "Reload").
type source struct {
	files    Files
	onError  func(error)
	interval time.Duration
	// build makes the server's config of a material (nil for a client).
	build func(*material)

	cur       atomic.Pointer[material]
	nextCheck atomic.Int64 // unix nanoseconds; no check before
	mu        sync.Mutex   // one check at a time
	// failed are the stamps of the files whose reading failed last (not
	// read again until they change); reported the error last told.
	failed   stamps
	reported string
}

func newSource(files Files, build func(*material), opts []Option) (*source, error) {
	s := &source{files: files, interval: checkInterval, build: build}
	for _, o := range opts {
		o(s)
	}
	st, err := s.stat()
	if err != nil {
		return nil, err
	}
	m, err := s.load(st)
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.nextCheck.Store(time.Now().Add(s.interval).UnixNano())
	return s, nil
}

// get returns the material to use now, first reading the files again when
// a check is due and they changed. A handshake that finds another one
// checking does not wait for it.
func (s *source) get() *material {
	m := s.cur.Load()
	now := time.Now()
	if now.UnixNano() < s.nextCheck.Load() || !s.mu.TryLock() {
		return m
	}
	defer s.mu.Unlock()
	m = s.cur.Load()
	s.nextCheck.Store(now.Add(s.interval).UnixNano())
	st, err := s.stat()
	switch {
	case err != nil:
		s.report(err)
		return m
	case st == m.stamps: // the files in use (back after a failed change, perhaps)
		s.failed, s.reported = stamps{}, ""
		return m
	case st == s.failed:
		return m
	}
	nm, err := s.load(st)
	if err != nil {
		s.failed = st
		s.report(err)
		return m
	}
	s.failed, s.reported = stamps{}, ""
	s.cur.Store(nm)
	return nm
}

// report tells onError about err unless it was the last error told.
func (s *source) report(err error) {
	if s.onError == nil || err.Error() == s.reported {
		return
	}
	s.reported = err.Error()
	s.onError(fmt.Errorf("tlsconfig: keeping the files in use: %w", err))
}

func (s *source) stat() (stamps, error) {
	var st stamps
	for i, path := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		if path == "" {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return st, err
		}
		st[i] = stamp{modTime: fi.ModTime().UnixNano(), size: fi.Size()}
	}
	return st, nil
}

// load reads the files (whose stamps were st) into a new material.
func (s *source) load(st stamps) (*material, error) {
	m := &material{stamps: st}
	if s.files.CA != "" {
		pem, err := os.ReadFile(s.files.CA)
		if err != nil {
			return nil, err
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrInvalid, s.files.CA)
		}
	}
	if s.files.Cert != "" {
		if err := checkKeyMode(s.files.Key); err != nil {
			return nil, err
		}
		cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", s.files.Cert, s.files.Key, err)
		}
		m.cert = &cert
	}
	if s.build != nil {
		s.build(m)
	}
	return m, nil
}

// checkKeyMode refuses a key file that others than its owner may read.
func checkKeyMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: key %s has mode %#o: a private key must be readable by its owner only (chmod 600)",
			ErrInvalid, path, fi.Mode().Perm())
	}
	return nil
}
