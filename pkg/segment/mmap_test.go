package segment

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// TestLogWritesThroughMapping checks the mapped write path: the segment being
// written is mapped, earlier ones are not; records are readable through
// pread and in the file itself before any Sync (they are in the page cache);
// and a reopened log recovers them all.
func TestLogWritesThroughMapping(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	want := writeRecords(t, l, 0, 120)
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("expected several segments, got %d", len(segs))
	}
	if !l.Mapped(l.End() - 1) {
		t.Fatal("the segment being written is not mapped")
	}
	if l.Mapped(segs[0].Base) {
		t.Fatal("a segment the writer left is still mapped")
	}

	// One more record, not synced: the file holds it at once.
	b := l.NewBatch()
	p := []byte("written through the mapping")
	off, err := b.Append(1, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	want = append(want, rec{off, p})
	path, base := segmentOf(t, dir, off)
	rel := off - base
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, got, n, err := ParseRecord(raw[rel:])
	if err != nil || !bytes.Equal(got, p) || int64(n) != RecordSize(len(p)) {
		t.Fatalf("file at %d: %q, %v", rel, got, err)
	}
	for _, r := range want {
		_, p, _, err := l.ReadRecord(r.off, int(RecordSize(len(r.payload))), nil)
		if err != nil || !bytes.Equal(p, r.payload) {
			t.Fatalf("read at %d: %v", r.off, err)
		}
	}
	end := l.End()
	if err := l.Close(); err != nil { // no Sync: the page cache has the bytes
		t.Fatal(err)
	}

	l, err = OpenLog(dir, LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recovered, res, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, recovered, want)
	if res.End != end || res.TornAt != -1 {
		t.Fatalf("recovered end %d (torn %d), want %d", res.End, res.TornAt, end)
	}
}

// TestLogResetUnmapsCutSegments cuts a mapped log back inside its last
// segment and then into an earlier one, writing after each cut: the cut
// segment's mapping is released before its file shrinks, and writes after
// the cut land where they should.
func TestLogResetUnmapsCutSegments(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := writeRecords(t, l, 0, 100)
	if !l.Mapped(l.End() - 1) {
		t.Fatal("last segment not mapped")
	}
	segs := l.Segments()
	last := segs[len(segs)-1].Base
	cut := 0 // keep the records below a point inside the last segment
	for i, r := range want {
		if r.off > last {
			cut = i
			break
		}
	}
	if cut == 0 {
		t.Fatal("no record inside the last segment after its first")
	}
	if err := l.Reset(want[cut].off); err != nil {
		t.Fatal(err)
	}
	if l.Mapped(last) {
		t.Fatal("a cut segment is still mapped")
	}
	want = append(want[:cut], writeRecords(t, l, 500, 10)...)
	if !l.Mapped(l.End() - 1) {
		t.Fatal("the cut segment was not mapped again by the next write")
	}

	// Into the first segment: the later ones, mapped or not, are removed.
	keep := 3
	if err := l.Reset(want[keep].off); err != nil {
		t.Fatal(err)
	}
	want = append(want[:keep], writeRecords(t, l, 700, 40)...)
	got, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
}

// TestLogNoMmap writes with pwrite when mapping is off, and with
// NoPreallocate (a sparse file could fault a copy on a full disk).
func TestLogNoMmap(t *testing.T) {
	for _, opts := range []LogOptions{{SegmentSize: 8192, NoMmap: true}, {SegmentSize: 8192, NoPreallocate: true}} {
		dir := t.TempDir()
		l, err := OpenLog(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		want := writeRecords(t, l, 0, 50)
		if l.Mapped(l.End() - 1) {
			t.Fatalf("%+v: segment mapped", opts)
		}
		got, _, err := recoverAll(t, l, false)
		if err != nil {
			t.Fatal(err)
		}
		sameRecs(t, got, want)
		l.Close()
	}
}

// TestBatchAppendRecord copies records verbatim from one log into another at
// the same offsets, across segment ends, as a replica does.
func TestBatchAppendRecord(t *testing.T) {
	src, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	want := writeRecords(t, src, 0, 150)
	dst, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	b := dst.NewBatch()
	for _, r := range want {
		size := RecordSize(len(r.payload))
		raw := make([]byte, size)
		if err := src.ReadAt(raw, r.off); err != nil {
			t.Fatal(err)
		}
		off, err := b.AppendRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		if off != r.off {
			t.Fatalf("record at %d in the source lands at %d", r.off, off)
		}
	}
	if err := dst.Write(b); err != nil {
		t.Fatal(err)
	}
	got, _, err := recoverAll(t, dst, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
	if _, err := b.AppendRecord(make([]byte, 8193)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
}

// TestLogRoom reports what is left of the segment being written, and 0 at a
// segment's end, where the next write creates a file.
func TestLogRoom(t *testing.T) {
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if r := l.Room(); r != 0 {
		t.Fatalf("empty log: room %d, want 0 (no segment yet)", r)
	}
	b := l.NewBatch()
	if _, err := b.Append(1, nil, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	if r, want := l.Room(), 4096-RecordSize(100); r != want {
		t.Fatalf("room %d, want %d", r, want)
	}
	b.Reset()
	if _, err := b.Append(1, nil, make([]byte, 4096-2*HeaderSize-100)); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	if r := l.Room(); r != 0 {
		t.Fatalf("full segment: room %d, want 0", r)
	}
}
