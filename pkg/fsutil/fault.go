package fsutil

import (
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
)

// Op names the file operations FaultFS can fail.
type Op uint8

// Operations FaultFS can fail.
const (
	OpWrite    Op = 1 << iota // File.WriteAt
	OpSync                    // File.Sync, FS.SyncDir and FS.SyncFS
	OpAllocate                // File.Allocate and File.Truncate growing a file
	OpCreate                  // FS.OpenFile with O_CREATE of a missing file, FS.Rename
)

// FaultFS wraps an FS and fails chosen operations with a chosen error, to
// test full disks (syscall.ENOSPC) and I/O errors against real files. The
// zero faults pass everything through. Safe for concurrent use.
type FaultFS struct {
	FS
	mu     sync.Mutex
	ops    Op
	err    error
	budget int64 // bytes WriteAt may still write when limited; -1 = unlimited
	// Writes counts WriteAt calls that reached the inner file.
	Writes atomic.Int64
}

// NewFaultFS wraps inner (OS when nil).
func NewFaultFS(inner FS) *FaultFS {
	if inner == nil {
		inner = OS
	}
	return &FaultFS{FS: inner, budget: -1}
}

// Fail makes every operation in ops return err (ENOSPC when err is nil)
// until Heal.
func (f *FaultFS) Fail(ops Op, err error) {
	if err == nil {
		err = syscall.ENOSPC
	}
	f.mu.Lock()
	f.ops, f.err = ops, err
	f.mu.Unlock()
}

// LimitWrites lets WriteAt write n more bytes in total; the write that
// crosses the limit writes its first part and then fails with ENOSPC, as a
// disk filling up mid-write does. Every later write, allocation and sync of
// a file that was written fails too, until Heal.
func (f *FaultFS) LimitWrites(n int64) {
	f.mu.Lock()
	f.budget = n
	f.mu.Unlock()
}

// Heal removes every fault: space has returned.
func (f *FaultFS) Heal() {
	f.mu.Lock()
	f.ops, f.err, f.budget = 0, nil, -1
	f.mu.Unlock()
}

func (f *FaultFS) check(op Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ops&op != 0 {
		return f.err
	}
	if f.budget == 0 && op&(OpWrite|OpAllocate|OpSync) != 0 {
		return syscall.ENOSPC
	}
	return nil
}

// take reserves up to n bytes of the write budget.
func (f *FaultFS) take(n int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ops&OpWrite != 0 {
		return 0, f.err
	}
	if f.budget < 0 {
		return n, nil
	}
	if int64(n) <= f.budget {
		f.budget -= int64(n)
		return n, nil
	}
	k := int(f.budget)
	f.budget = 0
	return k, syscall.ENOSPC
}

// OpenFile opens name through the inner FS.
func (f *FaultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if flag&syscall.O_CREAT != 0 {
		if err := f.check(OpCreate); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	inner, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: inner, fs: f}, nil
}

// Rename renames through the inner FS unless OpCreate fails.
func (f *FaultFS) Rename(from, to string) error {
	if err := f.check(OpCreate); err != nil {
		return &fs.PathError{Op: "rename", Path: from, Err: err}
	}
	return f.FS.Rename(from, to)
}

// SyncDir syncs through the inner FS unless OpSync fails.
func (f *FaultFS) SyncDir(name string) error {
	if err := f.check(OpSync); err != nil {
		return &fs.PathError{Op: "fsync", Path: name, Err: err}
	}
	return f.FS.SyncDir(name)
}

// SyncFS syncs through the inner FS unless OpSync fails.
func (f *FaultFS) SyncFS(name string) error {
	if err := f.check(OpSync); err != nil {
		return &fs.PathError{Op: "syncfs", Path: name, Err: err}
	}
	return f.FS.SyncFS(name)
}

type faultFile struct {
	File
	fs *FaultFS
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	n, ferr := f.fs.take(len(p))
	if n == 0 && ferr != nil {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: ferr}
	}
	f.fs.Writes.Add(1)
	w, err := f.File.WriteAt(p[:n], off)
	if err != nil {
		return w, err
	}
	if ferr != nil {
		return w, &fs.PathError{Op: "write", Path: f.Name(), Err: ferr}
	}
	return w, nil
}

func (f *faultFile) Sync() error {
	if err := f.fs.check(OpSync); err != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return f.File.Sync()
}

func (f *faultFile) Allocate(off, size int64) error {
	if err := f.fs.check(OpAllocate); err != nil {
		return &fs.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return f.File.Allocate(off, size)
}

func (f *faultFile) Truncate(size int64) error {
	if cur, err := f.File.Size(); err == nil && size > cur {
		if err := f.fs.check(OpAllocate); err != nil {
			return &fs.PathError{Op: "truncate", Path: f.Name(), Err: err}
		}
	}
	return f.File.Truncate(size)
}
