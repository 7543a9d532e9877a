package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/qmq-go/qmq/pkg/segment"
)

func TestEntryRoundTrip(t *testing.T) {
	e := entry{offset: 1 << 40, size: 300, timestamp: 1_700_000_000_123, deliverAt: 1_700_000_005_000, bloom: tagBloom([]byte("red")) | tagBloom([]byte("x"))}
	var b [entryWidth]byte
	e.put(b[:])
	got, ok := decodeEntry(b[:])
	if !ok || got != e {
		t.Fatalf("got %+v ok %v", got, ok)
	}
	for i := range b {
		c := b
		c[i] ^= 0x04
		if _, ok := decodeEntry(c[:]); ok {
			t.Fatalf("flipped byte %d not detected", i)
		}
	}
}

func TestActionRoundTrip(t *testing.T) {
	runs := []run{{start: 5, count: 3}, {start: 100, count: 1}}
	p := encodeActionHead(nil, actPull, false, "subj", "grp", "cons", 42)
	p = appendInt64(p, 7)
	p = append(p, 0, 0, 0, 2)
	p = appendInt64(p, 104)
	p = appendRuns(p, runs)
	a, err := decodeAction(actPull, p)
	if err != nil || a.subject != "subj" || a.group != "grp" || a.consumer != "cons" || a.version != 42 || a.seq != 7 || a.taken != 2 || a.cursor != 104 || a.runCount != 4 {
		t.Fatalf("decoded %+v, %v", a, err)
	}
	for n := 0; n < len(p); n++ {
		if _, err := decodeAction(actPull, p[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := decodeAction(actPull, append(bytes.Clone(p), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte accepted: %v", err)
	}
	if _, err := decodeAction(99, p); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown action accepted: %v", err)
	}
}

func appendInt64(b []byte, v int64) []byte {
	for i := 7; i >= 0; i-- {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := &checkpoint{msgOffset: 123456, actionOffset: 789, lastTs: 1_700_000_000_000,
		subjects: []ckSubject{{"a", 10, 2, 500}, {"%RETRY%a%g", 3, 0, 7}},
		groups: []ckGroup{{key: groupKey{"a", "g", false}, version: 9, cursor: 8, returned: []run{{1, 2}},
			consumers: []ckConsumer{{"c1", 5, 3}, {"c2", 0, -1}}},
			{key: groupKey{"a", "b1", true}, version: 2, cursor: 10}}}
	b := c.encode()
	got, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.msgOffset != c.msgOffset || got.actionOffset != c.actionOffset || got.lastTs != c.lastTs || len(got.subjects) != 2 || got.subjects[1] != c.subjects[1] ||
		len(got.groups) != 2 || got.groups[0].consumers[1] != c.groups[0].consumers[1] || got.groups[0].returned[0] != c.groups[0].returned[0] || !got.groups[1].key.broadcast {
		t.Fatalf("decoded %+v", got)
	}
	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 0x01
		if _, err := decodeCheckpoint(d); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
	}
	for n := 0; n < len(b); n++ {
		if _, err := decodeCheckpoint(b[:n]); err == nil {
			t.Fatalf("truncated to %d accepted", n)
		}
	}
}

func FuzzDecodeAction(f *testing.F) {
	p := encodeActionHead(nil, actPull, false, "s", "g", "c", 1)
	p = appendInt64(p, 0)
	p = append(p, 0, 0, 0, 0)
	p = appendInt64(p, 1)
	p = appendRuns(p, []run{{0, 1}})
	f.Add(actPull, p)
	f.Add(actAck, appendInt64(encodeActionHead(nil, actAck, false, "s", "g", "c", 2), 5))
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		a, err := decodeAction(kind, b)
		if err != nil {
			return
		}
		if n := runsLen(a.runs); (a.kind == actPull && n > MaxPull) || (a.kind == actReturn && n > returnChunk) {
			t.Fatalf("action %d naming %d entries decoded", a.kind, n)
		}
		if a.kind == actPull && int64(len(expandRuns(a.runs))) != a.runCount {
			t.Fatalf("run count %d", a.runCount)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add((&checkpoint{subjects: []ckSubject{{"a", 1, 0, 9}}}).encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if !bytes.Equal(c.encode(), b) {
			t.Fatal("decoded checkpoint does not re-encode to its bytes")
		}
	})
}

// TestPullLogBuffering drives a consumer's pull log across the buffer
// threshold, the rewrite path and reads that span file and buffer.
func TestPullLogBuffering(t *testing.T) {
	l, err := segment.OpenFixed(t.TempDir(), segment.FixedOptions{Width: pullEntryWidth, SegmentEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{id: "c", log: l, acked: -1}
	var want []int64
	for i := 0; i < 1500+3*pullFlushBytes/pullEntryWidth; i += 3 { // past the threshold
		seqs := []int64{int64(i), int64(i + 1), int64(i + 2)}
		if err := c.writePullLog(int64(len(want)), seqs); err != nil {
			t.Fatal(err)
		}
		want = append(want, seqs...)
	}
	if c.plFlushed == 0 || len(c.plPending) == 0 {
		t.Fatalf("flushed %d pending %d: expected both", c.plFlushed, len(c.plPending))
	}
	got, err := c.readPullLog(0, int64(len(want))+5)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range want {
		if got[i] != v {
			t.Fatalf("entry %d: %d want %d", i, got[i], v)
		}
	}
	for _, v := range got[len(want):] {
		if v != voidEntry {
			t.Fatalf("entry past the end is %d", v)
		}
	}
	// A gap is filled with voids; a rewrite below the tail goes to the file.
	if err := c.writePullLog(int64(len(want))+2, []int64{7}); err != nil {
		t.Fatal(err)
	}
	if err := c.writePullLog(10, []int64{99}); err != nil {
		t.Fatal(err)
	}
	got, _ = c.readPullLog(int64(len(want)), 3)
	if got[0] != voidEntry || got[1] != voidEntry || got[2] != 7 {
		t.Fatalf("gap: %v", got)
	}
	if got, _ := c.readPullLog(9, 3); got[0] != 9 || got[1] != 99 || got[2] != 11 {
		t.Fatalf("rewrite: %v", got)
	}
	// A damaged entry in the file reads as void and is counted.
	var b [pullEntryWidth]byte
	binary.BigEndian.PutUint64(b[:], encodePullEntry(5, 5)^0x100)
	if err := l.WriteAt(5, b[:]); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.readPullLog(4, 3); got[0] != 4 || got[1] != voidEntry || got[2] != 6 || c.bad != 1 {
		t.Fatalf("damaged entry: %v, bad %d", got, c.bad)
	}
	// An entry moved to another pull seq fails its check too.
	binary.BigEndian.PutUint64(b[:], encodePullEntry(7, 7))
	l.WriteAt(8, b[:])
	if got, _ := c.readPullLog(8, 1); got[0] != voidEntry || c.bad != 2 {
		t.Fatalf("misplaced entry: %v, bad %d", got, c.bad)
	}
}
