package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// trimFS records the cuts of files and can hold the first operation on a
// deleted segment's file (its rename, or its removal) until released.
type trimFS struct {
	fsutil.FS
	hold    chan struct{} // when set, Rename and Remove of a .seg wait on it
	reached chan struct{} // closed when one of them first waits
	once    sync.Once

	mu   sync.Mutex
	cuts []int64 // sizes the files were truncated to, in order
}

func (f *trimFS) wait(name string) {
	if f.hold == nil || !strings.HasSuffix(name, segSuffix) {
		return
	}
	f.once.Do(func() { close(f.reached) })
	<-f.hold
}

func (f *trimFS) Rename(from, to string) error { f.wait(from); return f.FS.Rename(from, to) }
func (f *trimFS) Remove(name string) error     { f.wait(name); return f.FS.Remove(name) }

func (f *trimFS) OpenFile(name string, flag int, perm os.FileMode) (fsutil.File, error) {
	inner, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &trimFile{File: inner, fs: f}, nil
}

type trimFile struct {
	fsutil.File
	fs *trimFS
}

func (f *trimFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	f.fs.cuts = append(f.fs.cuts, size)
	f.fs.mu.Unlock()
	return f.File.Truncate(size)
}

// A deleted segment's file is cut down in TrimStep steps under a trash
// name and then removed; the log reads on from its new start.
func TestLogDeleteBeforeCutsInSteps(t *testing.T) {
	dir := t.TempDir()
	fs := &trimFS{FS: fsutil.OS}
	l, err := OpenLog(dir, LogOptions{FS: fs, SegmentSize: 64 << 10, TrimStep: 16 << 10, TrimPause: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := writeRecords(t, l, 0, 1000)
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	fs.mu.Lock()
	fs.cuts = nil // the preallocations
	fs.mu.Unlock()
	n, err := l.DeleteBefore(segs[1].Base + segs[1].Size)
	if err != nil || n != 2 {
		t.Fatalf("DeleteBefore = %d, %v; want 2 segments", n, err)
	}
	want := []int64{48 << 10, 32 << 10, 16 << 10, 48 << 10, 32 << 10, 16 << 10}
	fs.mu.Lock()
	cuts := fs.cuts
	fs.mu.Unlock()
	if len(cuts) != len(want) {
		t.Fatalf("files cut to %v, want %v", cuts, want)
	}
	for i := range want {
		if cuts[i] != want[i] {
			t.Fatalf("files cut to %v, want %v", cuts, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if b, ok := ParseFileName(e.Name()); (ok && b < segs[2].Base) || strings.HasSuffix(e.Name(), trashSuffix) {
			t.Fatalf("%s left in the directory", e.Name())
		}
	}
	for _, r := range recs {
		if r.off < segs[2].Base {
			continue
		}
		if _, p, _, err := l.ReadRecord(r.off, int(RecordSize(len(r.payload))), nil); err != nil || string(p) != string(r.payload) {
			t.Fatalf("record at %d after the deletion: %q, %v", r.off, p, err)
		}
	}
}

// The log's lock is not held while a deleted segment's file goes: the
// writer appends and syncs while the removal waits (on a disk mounted with
// discard it can take a long time).
func TestLogDeleteBeforeLeavesTheLogFree(t *testing.T) {
	for _, step := range []int64{16 << 10, -1} {
		fs := &trimFS{FS: fsutil.OS, hold: make(chan struct{}), reached: make(chan struct{})}
		l, err := OpenLog(t.TempDir(), LogOptions{FS: fs, SegmentSize: 64 << 10, TrimStep: step, TrimPause: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		writeRecords(t, l, 0, 1000)
		segs := l.Segments()
		done := make(chan error, 1)
		go func() {
			_, err := l.DeleteBefore(segs[1].Base)
			done <- err
		}()
		<-fs.reached
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			writeRecords(t, l, 1000, 50)
			if l.Start() != segs[1].Base {
				t.Errorf("start %d while the file goes, want %d", l.Start(), segs[1].Base)
			}
		}()
		select {
		case <-wrote:
		case <-time.After(10 * time.Second):
			t.Fatalf("step %d: appends and syncs waited for a deleted segment's file to go", step)
		}
		close(fs.hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
}

// A trash file left by a deletion cut short (the process ended) is removed
// when the log opens; the segments are untouched.
func TestOpenLogRemovesTrash(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	recs := writeRecords(t, l, 0, 500)
	segs := l.Segments()
	l.Close()
	trash := filepath.Join(dir, FileName(segs[0].Base)+trashSuffix)
	if err := os.Rename(filepath.Join(dir, FileName(segs[0].Base)), trash); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(trash, 1000); err != nil {
		t.Fatal(err)
	}
	l, err = OpenLog(dir, LogOptions{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat(trash); !os.IsNotExist(err) {
		t.Fatalf("trash file still there after OpenLog: %v", err)
	}
	if got := l.Segments(); len(got) != len(segs)-1 || got[0].Base != segs[1].Base {
		t.Fatalf("segments %+v after reopening, want those from %d", got, segs[1].Base)
	}
	var kept []rec
	for _, r := range recs {
		if r.off >= segs[1].Base {
			kept = append(kept, r)
		}
	}
	var got []rec
	if _, err := l.Recover(segs[1].Base, false, func(off int64, _ uint8, p []byte) error {
		got = append(got, rec{off, bytes.Clone(p)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, kept)
}
