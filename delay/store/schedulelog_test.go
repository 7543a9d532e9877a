package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestHourNames(t *testing.T) {
	for _, ts := range []time.Time{epoch, time.Date(2032, 2, 29, 23, 59, 59, 999e6, time.UTC), time.Unix(0, 0)} {
		h := hourOf(ts.UnixMilli())
		name := hourName(h)
		if name != ts.UTC().Format("2006010215") {
			t.Fatalf("hourName(%v) = %s", ts, name)
		}
		back, ok := parseHourName(name)
		if !ok || back != h {
			t.Fatalf("parseHourName(%s) = %d %v, want %d", name, back, ok, h)
		}
	}
	for _, bad := range []string{"", "2030031", "203003141x", "2030133110", "LOCK", "2030031410.tmp"} {
		if _, ok := parseHourName(bad); ok {
			t.Fatalf("parseHourName(%q) accepted", bad)
		}
	}
	if hourOf(-1) != -1 || hourOf(0) != 0 || hourOf(hourMillis-1) != 0 {
		t.Fatal("hourOf floors wrongly")
	}
	// A message already due goes to the hour it was appended in.
	if scheduleHour(0, 5*hourMillis+7) != 5 || scheduleHour(9*hourMillis, 5*hourMillis) != 9 {
		t.Fatal("scheduleHour")
	}
}

func writeScheduleFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "2030031410")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestScanSchedule_StopsAtFirstInvalidRecord(t *testing.T) {
	var good []byte
	var offs []int64
	for i, id := range ids("s", 5) {
		offs = append(offs, int64(len(good)))
		good = appendScheduleRecord(good, int64(100+i), encode(t, id, epoch))
	}
	extra := appendScheduleRecord(nil, 200, encode(t, "extra", epoch))
	cases := []struct {
		name string
		tail []byte
	}{
		{"clean", nil},
		{"half header", extra[:7]},
		{"half body", extra[:len(extra)-5]},
		{"bad crc", func() []byte { b := append([]byte(nil), extra...); b[20] ^= 1; return b }()},
		{"zeros", make([]byte, 64)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := writeScheduleFile(t, append(append([]byte(nil), good...), c.tail...))
			var seen []int64
			res := scanSchedule(f, -1, 1<<20, func(off int64, msg []byte) { seen = append(seen, off) })
			if res.end != int64(len(good)) || res.records != 5 || res.lastWAL != 104 || len(seen) != 5 {
				t.Fatalf("end %d records %d lastWAL %d seen %v", res.end, res.records, res.lastWAL, seen)
			}
			for i := range offs {
				if seen[i] != offs[i] {
					t.Fatalf("offsets %v, want %v", seen, offs)
				}
			}
			if (c.tail == nil) != (res.err == nil) || (res.err != nil && !errors.Is(res.err, errTorn)) {
				t.Fatalf("err %v", res.err)
			}
		})
	}
	// A limit stops the scan at a record boundary without error.
	f := writeScheduleFile(t, good)
	if res := scanSchedule(f, offs[3], 1<<20, nil); res.records != 3 || res.err != nil {
		t.Fatalf("limited scan: %+v", res)
	}
}

func FuzzScanSchedule(f *testing.F) {
	f.Add(appendScheduleRecord(nil, 1, mustEncodeF("a")))
	f.Add([]byte{0, 0, 0, 40, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		file := writeScheduleFile(t, data)
		prev := int64(-1)
		res := scanSchedule(file, -1, 1<<20, func(off int64, msg []byte) {
			if off <= prev || off+scheduleHeaderSize+int64(len(msg)) > int64(len(data)) {
				t.Fatalf("record at %d outside the data", off)
			}
			prev = off
		})
		if res.end > int64(len(data)) || (res.err == nil && res.end != int64(len(data))) {
			t.Fatalf("scan ended at %d of %d with %v", res.end, len(data), res.err)
		}
	})
}

func mustEncodeF(id string) []byte {
	b, err := encodeBody(id, epoch, []byte("x"))
	if err != nil {
		panic(err)
	}
	return b
}

func TestParseDispatch_SortsDedupesAndStopsAtTornEntry(t *testing.T) {
	var b []byte
	for _, o := range []int64{50, 10, 30, 10, 20} {
		b = appendDispatchEntry(b, o)
	}
	valid := int64(len(b))
	bad := appendDispatchEntry(nil, 99)
	bad[3] ^= 1
	b = append(b, bad...)
	b = append(b, appendDispatchEntry(nil, 77)...) // after a bad entry: not trusted
	offs, size := parseDispatch(b)
	if size != valid || len(offs) != 4 || offs[0] != 10 || offs[3] != 50 {
		t.Fatalf("offsets %v size %d (want 4 unique, size %d)", offs, size, valid)
	}
	if offs, size := parseDispatch(b[:valid+5]); size != valid || len(offs) != 4 {
		t.Fatalf("partial entry: %v %d", offs, size)
	}
}

func FuzzParseDispatch(f *testing.F) {
	f.Add(appendDispatchEntry(appendDispatchEntry(nil, 1), 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		offs, size := parseDispatch(b)
		if size%dispatchEntrySize != 0 || size > int64(len(b)) || int64(len(offs)) > size/dispatchEntrySize {
			t.Fatalf("size %d offsets %d of %d bytes", size, len(offs), len(b))
		}
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Fatal("offsets not strictly ascending")
			}
		}
	})
}

func TestFileCache_BoundsOpenFiles(t *testing.T) {
	dir := t.TempDir()
	c := newFileCache(dir, 4)
	defer c.closeAll()
	held, err := c.acquire(1000, true)
	if err != nil {
		t.Fatal(err)
	}
	for h := int64(0); h < 100; h++ {
		cf, err := c.acquire(h, true)
		if err != nil {
			t.Fatal(err)
		}
		c.release(cf)
		if open, _ := c.pool.Stats(); open > 4 {
			t.Fatalf("%d files open, limit 4", open)
		}
	}
	if _, err := held.File.WriteAt([]byte("x"), 0); err != nil {
		t.Fatalf("held file unusable: %v", err)
	}
	c.forget(1000)
	if _, err := held.File.WriteAt([]byte("y"), 1); err != nil {
		t.Fatalf("forgotten file closed while held: %v", err)
	}
	c.release(held)
	if _, err := held.File.WriteAt([]byte("z"), 2); err == nil {
		t.Fatal("forgotten file still open after release")
	}
	if _, err := c.acquire(5000, false); err == nil {
		t.Fatal("acquire without create opened a missing file")
	}
}

func TestOptions_Validate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, o := range []Options{
		{Flush: "maybe"},
		{SegmentSize: 1000},
		{Tick: time.Second, Window: time.Millisecond},
		{MaxOpenFiles: 1},
		{FireBatch: -1},
		{Horizon: 200 * 365 * 24 * time.Hour},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := Open(t.TempDir(), Options{Flush: "never"}, nil, nil); err == nil {
		t.Fatal("Open accepted bad options")
	}
}
