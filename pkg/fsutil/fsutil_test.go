package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteFileAtomicReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "meta")
	if err := WriteFileAtomic(OS, p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(OS, p, []byte("two!")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two!" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temp file left behind: %v", err)
	}
}

func TestWriteFileAtomicFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "meta")
	ffs := NewFaultFS(nil)
	if err := WriteFileAtomic(ffs, p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	ffs.Fail(OpSync, nil)
	err := WriteFileAtomic(ffs, p, []byte("new"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("want ENOSPC, got %v", err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "old" {
		t.Fatalf("old content lost: %q", b)
	}
	ffs.Heal()
	if err := WriteFileAtomic(ffs, p, []byte("new")); err != nil {
		t.Fatal(err)
	}
}

func TestFaultFSPartialWrite(t *testing.T) {
	ffs := NewFaultFS(nil)
	f, err := ffs.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ffs.LimitWrites(5)
	n, err := f.WriteAt([]byte("0123456789"), 0)
	if n != 5 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("sync after full: %v", err)
	}
	ffs.Heal()
	if _, err := f.WriteAt([]byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	if sz, _ := f.Size(); sz != 6 {
		t.Fatalf("size %d", sz)
	}
}

func TestAllocateExtends(t *testing.T) {
	f, err := OS.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Allocate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if sz, _ := f.Size(); sz != 1<<20 {
		t.Fatalf("size %d", sz)
	}
}

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	l, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockDir(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	l2.Unlock()
}
