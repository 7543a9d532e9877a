package segment

import (
	"bytes"
	"errors"
	"testing"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

func TestReaderAcrossSegmentsUnderALimit(t *testing.T) {
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := writeRecords(t, l, 0, 200)
	if len(l.Segments()) < 3 {
		t.Fatalf("expected several segments, got %d", len(l.Segments()))
	}
	r := l.NewReader(0)
	for i, w := range want {
		off, kind, p, ok, err := r.Next(l.End())
		if err != nil || !ok || off != w.off || kind != 1 || !bytes.Equal(p, w.payload) {
			t.Fatalf("record %d: off %d (want %d) ok %v err %v", i, off, w.off, ok, err)
		}
	}
	if _, _, _, ok, err := r.Next(l.End()); ok || err != nil {
		t.Fatalf("read past the end: ok %v err %v", ok, err)
	}
	// A limit inside a record stops before it; the reader stays there.
	r.SetPos(want[10].off)
	if _, _, _, ok, err := r.Next(want[11].off + 5); !ok || err != nil {
		t.Fatal("record under the limit not read")
	}
	if _, _, _, ok, err := r.Next(want[11].off + 5); ok || err != nil || r.Pos() != want[11].off {
		t.Fatalf("record beyond the limit: ok %v err %v pos %d", ok, err, r.Pos())
	}
	if off, _, _, ok, _ := r.Next(l.End()); !ok || off != want[11].off {
		t.Fatalf("after the limit grew: %d %v", off, ok)
	}
}

func TestReaderDamage(t *testing.T) {
	for _, c := range []struct {
		name string
		at   func(r rec) int64
	}{
		{"bad crc", func(r rec) int64 { return r.off + HeaderSize + 1 }},
		{"bad magic", func(r rec) int64 { return r.off }},
		{"zero header", func(r rec) int64 { return -1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := OpenLog(dir, LogOptions{SegmentSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := writeRecords(t, l, 0, 5)
			l.mu.RLock()
			f := l.segs[0].f
			l.mu.RUnlock()
			if at := c.at(want[2]); at >= 0 {
				if _, err := f.WriteAt([]byte{0xff}, at); err != nil {
					t.Fatal(err)
				}
			} else if _, err := f.WriteAt(make([]byte, HeaderSize), want[2].off); err != nil {
				t.Fatal(err)
			}
			r := l.NewReader(want[1].off)
			if _, _, _, ok, err := r.Next(l.End()); !ok || err != nil {
				t.Fatal(err)
			}
			if _, _, _, ok, err := r.Next(l.End()); ok || !errors.Is(err, ErrCorrupt) || r.Pos() != want[2].off {
				t.Fatalf("damaged record: ok %v err %v pos %d", ok, err, r.Pos())
			}
		})
	}
}

// A record larger than SegmentSize gets a segment of its own under
// LargeRecords, which Recover, ReadRecord and Reader read back.
func TestLogLargeRecords(t *testing.T) {
	dir := t.TempDir()
	opts := LogOptions{SegmentSize: 4096, LargeRecords: true, MaxRecordSize: 1 << 20}
	l, err := OpenLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	b := l.NewBatch()
	small := bytes.Repeat([]byte("s"), 100)
	big := bytes.Repeat([]byte("B"), 10_000)
	var offs []int64
	for _, p := range [][]byte{small, big, small} {
		off, err := b.Append(1, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) != 3 || segs[1].Base != 4096 || segs[1].Size != RecordSize(len(big)) || segs[2].Base != 4096+RecordSize(len(big)) {
		t.Fatalf("segments %+v", segs)
	}
	if _, p, _, err := l.ReadRecord(offs[1], int(RecordSize(len(big))), nil); err != nil || !bytes.Equal(p, big) {
		t.Fatalf("read big: %v", err)
	}
	end := l.End()
	l.Close()
	if l, err = OpenLog(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, res, err := recoverAll(t, l, false)
	if err != nil || res.End != end || len(got) != 3 || got[1].off != offs[1] || !bytes.Equal(got[1].payload, big) {
		t.Fatalf("recover: %v, end %d (want %d), %d records", err, res.End, end, len(got))
	}
	r := l.NewReader(0)
	for i := range offs {
		if off, _, _, ok, err := r.Next(end); !ok || err != nil || off != offs[i] {
			t.Fatalf("reader record %d: %d %v %v", i, off, ok, err)
		}
	}
	// Without LargeRecords the limit stays the segment size.
	l2, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 4096, MaxRecordSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := l2.NewBatch().Append(1, big, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big record without LargeRecords: %v", err)
	}
}

// A record that ends exactly at a segment's end is followed by one in the
// next segment: the batch writes them as two chunks, each in its segment.
func TestBatchExactFill(t *testing.T) {
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := l.NewBatch()
	fill := make([]byte, 4096-HeaderSize)
	if _, err := b.Append(1, fill, nil); err != nil {
		t.Fatal(err)
	}
	off, err := b.Append(1, []byte("next"), nil)
	if err != nil || off != 4096 {
		t.Fatalf("second record at %d: %v", off, err)
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) != 2 || segs[1].Base != 4096 {
		t.Fatalf("segments %+v", segs)
	}
	l.mu.RLock()
	size, _ := l.segs[0].f.Size()
	l.mu.RUnlock()
	if size != 4096 {
		t.Fatalf("first segment is %d bytes: the second record was written past its end", size)
	}
	if _, p, _, err := l.ReadRecord(4096, int(RecordSize(4)), nil); err != nil || string(p) != "next" {
		t.Fatalf("second record: %q %v", p, err)
	}
}

// ErrNewSegment marks a failure to create the next segment; Reset to the
// batch's start takes the batch back and clears the poison.
func TestLogErrNewSegment(t *testing.T) {
	ffs := fsutil.NewFaultFS(nil)
	l, err := OpenLog(t.TempDir(), LogOptions{FS: ffs, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := writeRecords(t, l, 0, 3)
	start := l.End()
	ffs.Fail(fsutil.OpCreate, nil)
	b := l.NewBatch()
	for i := 0; i < 40; i++ {
		b.Append(1, payloadOf(i), nil)
	}
	if err := l.Write(b); !errors.Is(err, ErrNewSegment) {
		t.Fatalf("write: %v", err)
	}
	ffs.Heal()
	if err := l.Reset(start); err != nil {
		t.Fatal(err)
	}
	got, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
}

// A Reset past Synced keeps the segments written since the last Sync that
// it does not cut away on the list Sync goes through.
func TestLogResetKeepsUnsyncedSegments(t *testing.T) {
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := l.NewBatch()
	for i := 0; i < 100; i++ {
		if _, err := b.Append(1, payloadOf(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("segments %+v", segs)
	}
	if err := l.Reset(segs[1].Base + 1); err == nil {
		l.mu.RLock()
		n := len(l.unsynced)
		l.mu.RUnlock()
		if n != 2 {
			t.Fatalf("%d segments left to sync after the Reset, want the 2 the cut leaves", n)
		}
	} else {
		t.Fatal(err)
	}
}
