// Package testutil holds helpers for the project's tests: polling for a
// condition instead of sleeping, and finding the test binary's own path for
// tests that re-execute it as a child process (to SIGKILL it), mounting a
// small tmpfs to fill up (MountTmpfs), and reading the process's memory on
// transparent huge pages (AnonHugeKiB). Only test code
// imports it.
package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CheckFor calls fn every interval until it returns nil or timeout passes;
// then it fails the test with fn's last error.
func CheckFor(t testing.TB, timeout, interval time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Eventually is CheckFor for a boolean condition; msg describes it.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ChildEnv is the environment variable a re-executed test binary sees; its
// value names the role the child plays.
const ChildEnv = "QMQ_TEST_CHILD"

// ChildRole returns the role this process was started with as a child, or "".
func ChildRole() string { return os.Getenv(ChildEnv) }

// RequirePrivateTree fails the test unless every file and directory under
// dir (dir included) is accessible by its owner only: no group or other
// permission bits (data files 0600, directories 0700).
func RequirePrivateTree(t testing.TB, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %#o: group or others may read it", path, perm)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("%s holds nothing to check", dir)
	}
}
