package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// DropCache drops the synced bytes below its offset from the page cache,
// whether they were written by pwrite or through the writer's mapping,
// keeps what is not durable, and loses nothing: every record reads back.
func TestLogDropCache(t *testing.T) {
	for _, noMmap := range []bool{true, false} {
		name := "mapped"
		if noMmap {
			name = "pwrite"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			testutil.RequireDroppablePageCache(t, dir)
			const segSize = 1 << 20
			l, err := OpenLog(dir, LogOptions{SegmentSize: segSize, NoMmap: noMmap})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var want []rec
			for l.End() < 2*segSize+segSize/2 {
				want = append(want, writeRecords(t, l, len(want), 100)...)
			}
			if !noMmap {
				l.mu.RLock()
				mapped := l.segs[len(l.segs)-1].mapped != nil
				l.mu.RUnlock()
				if !mapped {
					t.Skip("the file system refuses the writer's mapping")
				}
			}
			synced := l.Synced()
			// Written after the last sync: never dropped.
			b := l.NewBatch()
			if _, err := b.Append(1, []byte("not"), []byte(" durable yet")); err != nil {
				t.Fatal(err)
			}
			if err := l.Write(b); err != nil {
				t.Fatal(err)
			}
			cached := func(base, off, size int64) (int, int) {
				return testutil.CachedPages(t, filepath.Join(dir, FileName(base)), off, size)
			}
			if c, _ := cached(0, 0, segSize); c == 0 {
				t.Fatal("nothing of the first segment was cached before DropCache: the test shows nothing")
			}

			page := int64(os.Getpagesize())
			below := int64(2*segSize + segSize/4) // inside the segment being written
			if from, to := l.DropCache(below); from != 0 || to != below/page*page {
				t.Fatalf("DropCache(%d) = %d, %d, want 0, %d", below, from, to, below/page*page)
			}
			for base := int64(0); base < 2*segSize; base += segSize {
				if c, n := cached(base, 0, segSize); c > testutil.DropSlack(n) {
					t.Fatalf("segment %d: %d of %d pages still cached", base, c, n)
				}
			}
			if c, n := cached(2*segSize, 0, segSize/4); c > testutil.DropSlack(n) {
				t.Fatalf("the written segment's dropped part: %d of %d pages still cached", c, n)
			}
			tail := synced - 2*segSize
			if c, _ := cached(2*segSize, segSize/4, tail-segSize/4); c == 0 {
				t.Fatal("the written segment's pages past the offset were dropped too")
			}
			// A lower offset does nothing; a later one stops at what is durable.
			if from, to := l.DropCache(below - segSize); from != below/page*page || to != from {
				t.Fatalf("DropCache below the last mark = %d, %d, want nothing at %d", from, to, below/page*page)
			}
			if from, to := l.DropCache(l.End() + segSize); from != below/page*page || to != synced/page*page {
				t.Fatalf("DropCache past the end = %d, %d, want %d up to the synced end %d rounded to a page", from, to, below/page*page, synced/page*page)
			}
			if c, _ := cached(2*segSize, synced-2*segSize, l.End()-synced); c == 0 {
				t.Fatal("bytes not yet durable were dropped")
			}
			for _, r := range want {
				_, payload, _, err := l.ReadRecord(r.off, int(RecordSize(len(r.payload))), nil)
				if err != nil {
					t.Fatalf("read %d after DropCache: %v", r.off, err)
				}
				if !bytes.Equal(payload, r.payload) {
					t.Fatalf("record at %d changed after DropCache", r.off)
				}
			}
		})
	}
}
