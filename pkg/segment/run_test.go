package segment

import (
	"bytes"
	"errors"
	"testing"
)

// TestBatchAppendRun copies a log into another as a replica does with
// runs of records that stay the caller's (interleaved with copied
// records, over several batches and across segment ends): the copy holds
// the same records at the same offsets, and the batch never writes into a
// run it was given.
func TestBatchAppendRun(t *testing.T) {
	src, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	want := writeRecords(t, src, 0, 300)
	dst, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	segOf := func(off int64) int64 { return off / 8192 }
	type given struct{ run, copy []byte }
	var runs []given
	b := dst.NewBatch()
	for i, k := 0, 0; i < len(want); k++ {
		// Runs of 1 to 6 records within one segment; every fourth step
		// one record copied with AppendRecord instead.
		n := 1 + k%6
		for j := 1; j < n; j++ {
			if i+j >= len(want) || segOf(want[i+j].off) != segOf(want[i].off) {
				n = j
				break
			}
		}
		last := want[i+n-1]
		end := last.off + RecordSize(len(last.payload))
		raw := make([]byte, end-want[i].off, end-want[i].off+4096) // room a careless append would use
		if err := src.ReadAt(raw, want[i].off); err != nil {
			t.Fatal(err)
		}
		var off int64
		if k%4 == 3 {
			n = 1
			off, err = b.AppendRecord(raw[:RecordSize(len(want[i].payload))])
		} else {
			off, err = b.AppendRun(raw, int(RecordSize(len(want[i].payload))), n)
			runs = append(runs, given{raw, bytes.Clone(raw[:cap(raw)])})
		}
		if err != nil {
			t.Fatal(err)
		}
		if off != want[i].off {
			t.Fatalf("record at %d in the source lands at %d", want[i].off, off)
		}
		i += n
		if k%5 == 4 || i == len(want) {
			if err := dst.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	got, _, err := recoverAll(t, dst, false)
	if err != nil {
		t.Fatal(err)
	}
	sameRecs(t, got, want)
	for i, r := range runs {
		if !bytes.Equal(r.run[:cap(r.run)], r.copy) {
			t.Fatalf("run %d was written into", i)
		}
	}
	if len(dst.Segments()) < 3 {
		t.Fatalf("test needs several segments, the copy has %d", len(dst.Segments()))
	}

	// A run that would cross a segment end adds nothing.
	b.Reset()
	room := dst.Room()
	end, records := b.End(), b.Records()
	over := make([]byte, room+100)
	if _, err := b.AppendRun(over, 64, 2); !errors.Is(err, ErrSpansSegments) {
		t.Fatalf("run across a segment end: %v", err)
	}
	if b.End() != end || b.Records() != records || b.Bytes() != 0 {
		t.Fatal("a refused run changed the batch")
	}
	if _, err := b.AppendRun(make([]byte, 9000), 8193, 1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized first record: %v", err)
	}
	if _, err := b.AppendRun(make([]byte, 10), 20, 1); err == nil {
		t.Fatal("a first record longer than its run was accepted")
	}
}
