package segment

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"golang.org/x/sys/unix"
)

// unwrittenBytes returns how many bytes of [off, off+size) of the file at
// path lie in extents the file system marks unwritten (preallocated, never
// written), from FS_IOC_FIEMAP; ok is false where the ioctl is refused.
func unwrittenBytes(t *testing.T, path string, off, size int64) (n int64, ok bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const maxExtents = 64
	// struct fiemap (32 bytes) followed by struct fiemap_extent (56 bytes) each.
	type extent struct {
		Logical, Physical, Length uint64
		_                         [2]uint64
		Flags                     uint32
		_                         [3]uint32
	}
	type fiemap struct {
		Start, Length                uint64
		Flags, Mapped, Count, unused uint32
		Extents                      [maxExtents]extent
	}
	const fsIocFiemap = 0xC020660B
	const extentLast, extentUnwritten = 0x1, 0x800
	start := uint64(off)
	for start < uint64(off+size) {
		m := fiemap{Start: start, Length: uint64(off+size) - start, Flags: 1 /* FIEMAP_FLAG_SYNC */, Count: maxExtents}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&m))); e != 0 {
			return 0, false
		}
		if m.Mapped == 0 {
			break
		}
		for _, e := range m.Extents[:m.Mapped] {
			lo, hi := max(e.Logical, uint64(off)), min(e.Logical+e.Length, uint64(off+size))
			if e.Flags&extentUnwritten != 0 && hi > lo {
				n += int64(hi - lo)
			}
			start = e.Logical + e.Length
			if e.Flags&extentLast != 0 {
				return n, true
			}
		}
	}
	return n, true
}

// ZeroFill turns the preallocated extents ahead of the writer into written
// ones, never touches what was written, and stops at the segment's end.
func TestLogZeroFillAhead(t *testing.T) {
	dir := t.TempDir()
	const segSize = 4 << 20
	l, err := OpenLog(dir, LogOptions{SegmentSize: segSize, NoMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := writeRecords(t, l, 0, 50)
	end := l.End()
	path := filepath.Join(dir, FileName(0))
	before, ok := unwrittenBytes(t, path, 0, segSize)
	if !ok || before == 0 {
		t.Skipf("the file system reports no unwritten extents (ok %v, %d bytes)", ok, before)
	}
	// From 0: the fill starts at the written end, rounded up to 4 KiB.
	got, err := l.ZeroFill(0, 1<<20)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no direct I/O here: %v", err)
	}
	if err != nil || got != 1<<20 {
		t.Fatalf("ZeroFill(0, 1 MiB) = %d, %v; want 1 MiB", got, err)
	}
	if n, _ := unwrittenBytes(t, path, 4096, 1<<20-4096); n != 0 {
		t.Fatalf("%d bytes of the filled range are still unwritten", n)
	}
	if n, _ := unwrittenBytes(t, path, 1<<20, segSize-1<<20); n == 0 {
		t.Fatal("the fill went past what was asked")
	}
	// Past the segment's end: clipped to it.
	if got, err := l.ZeroFill(1<<20, segSize+1<<20); err != nil || got != segSize {
		t.Fatalf("ZeroFill to past the segment = %d, %v; want %d", got, err, segSize)
	}
	// Nothing left ahead: from comes back.
	if got, err := l.ZeroFill(segSize, segSize+4096); err != nil || got != segSize {
		t.Fatalf("ZeroFill with nothing ahead = %d, %v", got, err)
	}
	if l.End() != end {
		t.Fatalf("end moved from %d to %d", end, l.End())
	}
	more := writeRecords(t, l, 50, 50)
	got2, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got2, append(want, more...))
}

// A writer appending while another goroutine fills ahead of it as closely
// as it can loses nothing: the fill never lands on written bytes.
func TestLogZeroFillRacesWriter(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 8 << 20, NoMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.ZeroFill(0, 4096); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no direct I/O here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	fills := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Right at the end: the writer's next batch lands in this range.
			if got, err := l.ZeroFill(l.End(), l.End()+64<<10); err != nil {
				t.Error(err)
				return
			} else if got > 0 {
				fills++
			}
		}
	}()
	var want []rec
	for i := 0; i < 40; i++ {
		want = append(want, writeRecords(t, l, i*100, 100)...)
	}
	close(stop)
	wg.Wait()
	if fills == 0 {
		t.Fatal("no fill ran beside the writer")
	}
	got, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
}

// Files that cannot be filled (FaultFS's) say so; a closed log fills nothing.
func TestLogZeroFillUnsupportedAndClosed(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 1 << 20, FS: fsutil.NewFaultFS(nil), NoMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	writeRecords(t, l, 0, 3)
	if _, err := l.ZeroFill(0, 1<<20); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("ZeroFill on a FaultFS file = %v, want ErrUnsupported", err)
	}
	l.Close()
	if got, err := l.ZeroFill(0, 1<<20); err != nil || got != 0 {
		t.Fatalf("ZeroFill after Close = %d, %v", got, err)
	}
}
