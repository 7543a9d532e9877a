package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

type rec struct {
	off     int64
	payload []byte
}

func payloadOf(i int) []byte {
	return bytes.Repeat([]byte{byte('a' + i%26)}, 10+i*7%300)
}

// writeRecords appends n records in batches of 7 and syncs.
func writeRecords(t *testing.T, l *Log, first, n int) []rec {
	t.Helper()
	var out []rec
	b := l.NewBatch()
	for i := first; i < first+n; i++ {
		p := payloadOf(i)
		off, err := b.Append(1, p[:3], p[3:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec{off, p})
		if b.Records() == 7 {
			if err := l.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	return out
}

func recoverAll(t *testing.T, l *Log, skip bool) ([]rec, RecoverResult, error) {
	t.Helper()
	var got []rec
	res, err := l.Recover(0, skip, func(off int64, kind uint8, p []byte) error {
		if kind != 1 {
			t.Fatalf("kind %d", kind)
		}
		got = append(got, rec{off, bytes.Clone(p)})
		return nil
	})
	return got, res, err
}

func sameRecs(t *testing.T, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].off != want[i].off || !bytes.Equal(got[i].payload, want[i].payload) {
			t.Fatalf("record %d: got off %d, want %d", i, got[i].off, want[i].off)
		}
	}
}

func TestLogWriteReadRecover(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	want := writeRecords(t, l, 0, 200)
	if len(l.Segments()) < 3 {
		t.Fatalf("expected several segments, got %d", len(l.Segments()))
	}
	for _, r := range want {
		_, p, _, err := l.ReadRecord(r.off, int(RecordSize(len(r.payload))), nil)
		if err != nil || !bytes.Equal(p, r.payload) {
			t.Fatalf("read at %d: %v", r.off, err)
		}
	}
	end := l.End()
	l.Close()

	l, err = OpenLog(dir, LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, res, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
	if res.End != end || res.TornAt != -1 || l.End() != end {
		t.Fatalf("end %d (log %d), want %d; torn %d", res.End, l.End(), end, res.TornAt)
	}
	// Appending continues after the recovered end.
	more := writeRecords(t, l, 200, 5)
	if more[0].off < end {
		t.Fatalf("new record at %d before end %d", more[0].off, end)
	}
}

// TestLogTornTailEveryByte cuts the last record at every byte and checks that
// recovery keeps exactly the complete records.
func TestLogTornTailEveryByte(t *testing.T) {
	src := t.TempDir()
	l, err := OpenLog(src, LogOptions{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	want := writeRecords(t, l, 0, 20)
	l.Close()
	last := want[len(want)-1]
	size := RecordSize(len(last.payload))
	seg := filepath.Join(src, FileName(0))
	orig, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for cut := int64(0); cut < size; cut++ {
		dir := t.TempDir()
		b := bytes.Clone(orig)
		clear(b[last.off+cut:])
		// Garbage instead of zeros half of the time: a torn page.
		if cut%2 == 1 {
			for i := last.off + cut; i < last.off+size; i++ {
				b[i] = 0xEE
			}
		}
		if err := os.WriteFile(filepath.Join(dir, FileName(0)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := OpenLog(dir, LogOptions{SegmentSize: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := recoverAll(t, l, false)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		sameRecs(t, got, want[:len(want)-1])
		if res.End != last.off {
			t.Fatalf("cut %d: end %d want %d", cut, res.End, last.off)
		}
		if cut%2 == 1 && res.TornAt != last.off {
			t.Fatalf("cut %d: torn at %d", cut, res.TornAt)
		}
		// The garbage is gone: a second recovery sees a clean end.
		again := writeRecords(t, l, 100, 1)
		l.Close()
		l, _ = OpenLog(dir, LogOptions{SegmentSize: 1 << 16})
		got, _, err = recoverAll(t, l, false)
		if err != nil || len(got) != len(want) || got[len(got)-1].off != again[0].off {
			t.Fatalf("cut %d: after rewrite got %d records, %v", cut, len(got), err)
		}
		l.Close()
	}
}

func TestLogCorruptMiddle(t *testing.T) {
	for _, where := range []string{"header", "payload", "crc", "zeroed", "other segment"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			l, err := OpenLog(dir, LogOptions{SegmentSize: 8192})
			if err != nil {
				t.Fatal(err)
			}
			want := writeRecords(t, l, 0, 100)
			l.Close()
			victim := want[5]
			if where == "other segment" {
				victim = want[len(want)/2]
			}
			seg, base := segmentOf(t, dir, victim.off)
			b, _ := os.ReadFile(seg)
			rel := victim.off - base
			switch where {
			case "header":
				b[rel+1] ^= 0xFF
			case "payload":
				b[rel+HeaderSize+2] ^= 0x01
			case "crc":
				b[rel+9] ^= 0x10
			case "zeroed":
				clear(b[rel : rel+RecordSize(len(victim.payload))])
			case "other segment":
				b[rel+5] ^= 0x40 // length
			}
			os.WriteFile(seg, b, 0o644)

			l, _ = OpenLog(dir, LogOptions{SegmentSize: 8192})
			_, _, err = recoverAll(t, l, false)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("want ErrCorrupt, got %v", err)
			}
			if want := fmt.Sprint(victim.off); !bytes.Contains([]byte(err.Error()), []byte(want)) {
				t.Fatalf("error %q does not name offset %s", err, want)
			}
			l.Close()
			l, _ = OpenLog(dir, LogOptions{SegmentSize: 8192})
			defer l.Close()
			got, res, err := recoverAll(t, l, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Corrupt) != 1 || res.Corrupt[0].From != victim.off {
				t.Fatalf("corrupt ranges %+v", res.Corrupt)
			}
			// Every record but the damaged one survives, none is invented.
			var expect []rec
			for _, r := range want {
				if r.off != victim.off {
					expect = append(expect, r)
				}
			}
			sameRecs(t, got, expect)
		})
	}
}

func segmentOf(t *testing.T, dir string, off int64) (string, int64) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	bases := listBases(entries)
	for i := len(bases) - 1; i >= 0; i-- {
		if bases[i] <= off {
			return filepath.Join(dir, FileName(bases[i])), bases[i]
		}
	}
	t.Fatalf("no segment for %d", off)
	return "", 0
}

func TestLogPoisonAndReset(t *testing.T) {
	dir := t.TempDir()
	ffs := fsutil.NewFaultFS(nil)
	l, err := OpenLog(dir, LogOptions{FS: ffs, SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := writeRecords(t, l, 0, 10)
	good := l.Synced()
	ffs.Fail(fsutil.OpWrite, nil)
	b := l.NewBatch()
	b.Append(1, []byte("x"), nil)
	if err := l.Write(b); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrPoisoned) {
		t.Fatalf("write: %v", err)
	}
	ffs.Heal()
	b.Reset()
	b.Append(1, []byte("y"), nil)
	if err := l.Write(b); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("poisoned log accepted a write: %v", err)
	}
	if err := l.Reset(good); err != nil {
		t.Fatal(err)
	}
	more := writeRecords(t, l, 10, 30)
	got, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, append(want, more...))
}

func TestLogFullDiskOnNewSegment(t *testing.T) {
	dir := t.TempDir()
	ffs := fsutil.NewFaultFS(nil)
	l, err := OpenLog(dir, LogOptions{FS: ffs, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := writeRecords(t, l, 0, 3)
	ffs.Fail(fsutil.OpAllocate, nil)
	b := l.NewBatch()
	for i := 0; i < 40; i++ {
		b.Append(1, payloadOf(i), nil)
	}
	if err := l.Write(b); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write: %v", err)
	}
	ffs.Heal()
	if err := l.Reset(l.Synced()); err != nil {
		t.Fatal(err)
	}
	got, _, err := recoverAll(t, l, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
}

func TestLogTooLarge(t *testing.T) {
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.NewBatch().Append(1, make([]byte, 5000), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestLogDeleteBefore(t *testing.T) {
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	writeRecords(t, l, 0, 100)
	segs := l.Segments()
	n, err := l.DeleteBefore(segs[2].Base)
	if err != nil || n != 2 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	if l.Start() != segs[2].Base {
		t.Fatalf("start %d", l.Start())
	}
	// Never the last segment.
	if _, err := l.DeleteBefore(l.End() + 1<<20); err != nil {
		t.Fatal(err)
	}
	if len(l.Segments()) != 1 {
		t.Fatalf("segments %d", len(l.Segments()))
	}
}

// TestLogZeroedRecordFarFromEnd: a record zeroed in a segment that is not
// the last, with valid records far behind it, is corruption, not an end.
func TestLogZeroedRecordFarFromEnd(t *testing.T) {
	dir := t.TempDir()
	opts := LogOptions{SegmentSize: 1 << 20, ResyncWindow: 4096}
	l, err := OpenLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var want []rec
	b := l.NewBatch()
	for i := 0; len(l.Segments()) < 2 || b.Records() > 0; i++ {
		p := bytes.Repeat([]byte{byte(i)}, 8000)
		off, _ := b.Append(1, p, nil)
		want = append(want, rec{off, p})
		if b.Records() == 10 {
			if err := l.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
		if len(l.Segments()) >= 2 && b.Records() == 0 {
			break
		}
	}
	l.Sync()
	l.Close()
	victim := want[1]
	seg, base := segmentOf(t, dir, victim.off)
	b2, _ := os.ReadFile(seg)
	clear(b2[victim.off-base : victim.off-base+RecordSize(len(victim.payload))])
	os.WriteFile(seg, b2, 0o644)
	l, _ = OpenLog(dir, opts)
	defer l.Close()
	if _, _, err := recoverAll(t, l, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("zeroed record in an early segment: %v", err)
	}
}

// TestFileName: names are the base in 20 zero-padded digits and ".seg",
// and ParseFileName reads them back.
func TestFileName(t *testing.T) {
	for _, base := range []int64{0, 1, 9, 10, 4096, 1 << 30, 123456789012345, math.MaxInt64} {
		want := fmt.Sprintf("%020d.seg", base)
		if got := FileName(base); got != want {
			t.Fatalf("FileName(%d) = %q, want %q", base, got, want)
		}
		if b, ok := ParseFileName(FileName(base)); !ok || b != base {
			t.Fatalf("ParseFileName(FileName(%d)) = %d, %v", base, b, ok)
		}
	}
	if got := FileName(-5); got != fmt.Sprintf("%020d.seg", -5) {
		t.Fatalf("FileName(-5) = %q", got)
	}
}
