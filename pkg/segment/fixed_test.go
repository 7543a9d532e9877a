package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

func entry(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// openTestFixed opens a FixedLog of 8-byte entries, 10 per file, in a new
// directory, with a pool of two files.
func openTestFixed(t *testing.T) (*FixedLog, string, *FilePool) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "c")
	pool := NewFilePool(nil, 2)
	t.Cleanup(func() { pool.Close() })
	l, err := OpenFixed(dir, FixedOptions{Width: 8, SegmentEntries: 10, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return l, dir, pool
}

func TestFixedLogWriteReadTruncate(t *testing.T) {
	l, dir, pool := openTestFixed(t)
	var all []byte
	for i := 0; i < 35; i++ {
		all = append(all, entry(uint64(i*3))...)
	}
	if err := l.WriteAt(0, all[:8*13]); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteAt(13, all[8*13:]); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8*40)
	n, err := l.ReadAt(0, buf)
	if err != nil || n != 35 || string(buf[:n*8]) != string(all) {
		t.Fatalf("read %d, %v", n, err)
	}
	l.Close()
	l, err = OpenFixed(dir, FixedOptions{Width: 8, SegmentEntries: 10, Pool: pool})
	if err != nil || l.Len() != 35 {
		t.Fatalf("reopen len %d, %v", l.Len(), err)
	}
	if err := l.Truncate(17); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, _ = OpenFixed(dir, FixedOptions{Width: 8, SegmentEntries: 10, Pool: pool})
	if l.Len() != 17 {
		t.Fatalf("len after truncate %d", l.Len())
	}
	n, _ = l.ReadAt(15, buf[:8*5])
	if n != 2 || binary.BigEndian.Uint64(buf[8:]) != 16*3 {
		t.Fatalf("read after truncate: %d", n)
	}
	if k, err := l.DeleteBefore(12); err != nil || k != 1 || l.First() != 12 {
		t.Fatalf("delete: %d %v first %d", k, err, l.First())
	}
	if _, err := l.ReadAt(5, buf[:8]); err == nil {
		t.Fatal("read below first succeeded")
	}
	if open, _ := pool.Stats(); open > 2 {
		t.Fatalf("pool holds %d files", open)
	}
}

func TestFilePoolBound(t *testing.T) {
	dir := t.TempDir()
	pool := NewFilePool(nil, 8)
	defer pool.Close()
	var logs []*FixedLog
	for i := 0; i < 50; i++ {
		l, err := OpenFixed(filepath.Join(dir, fmt.Sprint(i)), FixedOptions{Width: 8, Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.WriteAt(0, entry(uint64(i))); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
	}
	if open, _ := pool.Stats(); open > 8 {
		t.Fatalf("%d files open, bound 8", open)
	}
	buf := make([]byte, 8)
	for i, l := range logs {
		if n, err := l.ReadAt(0, buf); err != nil || n != 1 || binary.BigEndian.Uint64(buf) != uint64(i) {
			t.Fatalf("log %d: %d %v", i, n, err)
		}
	}
}

func TestFixedLogPoisonAndTruncate(t *testing.T) {
	ffs := fsutil.NewFaultFS(nil)
	l, err := OpenFixed(filepath.Join(t.TempDir(), "p"), FixedOptions{FS: ffs, Width: 8, SegmentEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WriteAt(0, append(entry(1), entry(2)...)); err != nil {
		t.Fatal(err)
	}
	ffs.Fail(fsutil.OpWrite, nil)
	if err := l.WriteAt(2, entry(3)); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrPoisoned) {
		t.Fatalf("write on a full disk: %v", err)
	}
	ffs.Heal()
	if err := l.WriteAt(2, entry(3)); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("poisoned log accepted a write: %v", err)
	}
	if err := l.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteAt(2, entry(3)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 24)
	if n, _ := l.ReadAt(0, buf); n != 3 || binary.BigEndian.Uint64(buf[16:]) != 3 {
		t.Fatalf("read %d", n)
	}
}
