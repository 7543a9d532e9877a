package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// writeWAL writes msgs through a walWriter with the given segment size and
// returns the offsets of the records and the end.
func writeWAL(t *testing.T, dir string, segSize int64, msgs [][]byte) ([]int64, int64) {
	t.Helper()
	f, alloc, err := createSegment(dir, 0, segSize, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &walWriter{dir: dir, segSize: segSize, f: f, alloc: alloc}
	var offs []int64
	for _, m := range msgs {
		need := int64(walHeaderSize + len(m))
		if w.pos+need > w.alloc && w.pos > 0 {
			old, err := w.roll(need)
			if err != nil {
				t.Fatal(err)
			}
			old.Close()
		}
		offs = append(offs, w.end())
		rec := appendWALRecord(nil, 42, m)
		if _, err := w.f.WriteAt(rec, w.pos); err != nil {
			t.Fatal(err)
		}
		w.pos += int64(len(rec))
	}
	w.f.Close()
	return offs, w.end()
}

func TestWAL_ReadsAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	var msgs [][]byte
	for i := 0; i < 50; i++ {
		body := make([]byte, 30_000+i*1000) // several records per 1 MiB segment, some rollovers
		m, err := encodeBody(fmt.Sprintf("m%d", i), epoch, body)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	big, _ := encodeBody("big", epoch, make([]byte, 3<<20)) // larger than a segment
	msgs = append(msgs, big)
	offs, end := writeWAL(t, dir, 1<<20, msgs)
	segs, _ := listSegments(dir)
	if len(segs) < 3 {
		t.Fatalf("segments %v: expected rollovers", segs)
	}
	r := newWALReader(dir, 0, 8<<20)
	defer r.close()
	for i, m := range msgs {
		rec, ok, err := r.next(end)
		if err != nil || !ok {
			t.Fatalf("record %d: ok=%v err=%v", i, ok, err)
		}
		if rec.offset != offs[i] || string(rec.message) != string(m) || rec.appendMillis != 42 {
			t.Fatalf("record %d at %d differs (want offset %d)", i, rec.offset, offs[i])
		}
	}
	if _, ok, err := r.next(end); ok || err != nil {
		t.Fatalf("read past the end: ok=%v err=%v", ok, err)
	}
	// Starting in the middle finds the right segment.
	r2 := newWALReader(dir, offs[30], 8<<20)
	defer r2.close()
	if rec, ok, _ := r2.next(-1); !ok || rec.offset != offs[30] {
		t.Fatalf("reader from offset %d got %v %v", offs[30], rec.offset, ok)
	}
	// A limit inside a record stops before it.
	r3 := newWALReader(dir, 0, 8<<20)
	defer r3.close()
	if _, ok, err := r3.next(offs[1] + 5); !ok || err != nil {
		t.Fatal("first record not read under a limit past it")
	}
	if _, ok, err := r3.next(offs[1] + 5); ok || err != nil {
		t.Fatalf("record beyond the limit returned: ok=%v err=%v", ok, err)
	}
}

func TestWAL_TornRecords(t *testing.T) {
	m := encode(t, "x", epoch)
	rec := appendWALRecord(nil, 7, m)
	cases := []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"bad crc", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{"cut body", func(b []byte) []byte { return b[:len(b)-3] }},
		{"huge length", func(b []byte) []byte { b[0] = 0x7f; return b }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			good := appendWALRecord(nil, 7, m)
			data := append(good, c.mut(append([]byte(nil), rec...))...)
			if err := os.WriteFile(filepath.Join(dir, segmentName(0)), data, 0o644); err != nil {
				t.Fatal(err)
			}
			r := newWALReader(dir, 0, 1<<20)
			defer r.close()
			if _, ok, err := r.next(-1); !ok || err != nil {
				t.Fatalf("good record: %v %v", ok, err)
			}
			_, ok, err := r.next(-1)
			if ok || (err != nil && !errors.Is(err, errTorn)) {
				t.Fatalf("torn record: ok=%v err=%v", ok, err)
			}
			if r.pos != int64(len(good)) {
				t.Fatalf("reader moved to %d past the torn record", r.pos)
			}
		})
	}
}

func FuzzWALReader(f *testing.F) {
	m, _ := encodeBody("f", epoch, []byte("body"))
	f.Add(append(appendWALRecord(nil, 1, m), appendWALRecord(nil, 2, m)...))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(0)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		r := newWALReader(dir, 0, 1<<20)
		defer r.close()
		prev := int64(-1)
		for i := 0; i < 1000; i++ {
			rec, ok, err := r.next(-1)
			if err != nil || !ok {
				break
			}
			if rec.offset <= prev || rec.offset+rec.size() > int64(len(data)) {
				t.Fatalf("record at %d of %d bytes outside the data", rec.offset, rec.size())
			}
			prev = rec.offset
		}
	})
}
