package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// AppendAsync with NoWait stores like AppendAsync when the queue has room,
// and fails like it once the store is closed. (The full-queue branch is a
// select with a default: it queues nothing and returns ErrWouldBlock.)
func TestAppendAsync_NoWait(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []Result, 1)
	if err := appendRaw(s, [][]byte{encode(t, "s", "id-1", []byte("x"))}, func(r []Result) { done <- r }, NoWait); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no result")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := appendRaw(s, [][]byte{encode(t, "s", "id-2", []byte("y"))}, func([]Result) {}, NoWait); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// tryAppendNow appends on the caller's goroutine only under FlushAsync, for
// subjects the store knows, and stores exactly what AppendAsync would: the
// sequences continue, the messages are readable, OnAppend fires, invalid
// messages fail alone.
func TestTryAppendNow(t *testing.T) {
	durable := openStore(t, t.TempDir(), testOptions())
	appendAll(t, durable, encode(t, "s", "a", []byte("x")))
	if _, ok := durable.tryAppendNow([][]byte{encode(t, "s", "b", []byte("y"))}); ok {
		t.Fatal("appended now under FlushSync")
	}
	if err := durable.Close(); err != nil {
		t.Fatal(err)
	}

	opts := testOptions()
	opts.Flush = FlushAsync
	var woken atomic.Int64
	opts.OnAppend = func(subject string, next int64) {
		if subject == "s" {
			woken.Store(next)
		}
	}
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	s.Watch("s")
	if _, ok := s.tryAppendNow([][]byte{encode(t, "s", "new", []byte("x"))}); ok {
		t.Fatal("appended now to a subject the store does not have yet")
	}
	appendAll(t, s, encode(t, "s", "first", []byte("x")))
	bad := encode(t, "s", "bad", []byte("z"))
	bad[len(bad)-1] ^= 1
	// The appender may still be finishing appendAll's request (its writer
	// lock, its queue count) for a moment: a refused try stores nothing, so
	// try until it is idle.
	var res []Result
	ok := false
	for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); {
		if res, ok = s.tryAppendNow([][]byte{encode(t, "s", "now-1", []byte("y")), bad, encode(t, "s", "now-2", []byte("w"))}); !ok {
			time.Sleep(time.Millisecond)
		}
	}
	if !ok {
		t.Fatal("did not append now with the appender idle")
	}
	if res[0].Err != nil || res[2].Err != nil || res[0].Seq != 1 || res[2].Seq != 2 {
		t.Fatalf("results %+v", res)
	}
	if !errors.Is(res[1].Err, protocol.ErrInvalid) {
		t.Fatalf("corrupt message: %v", res[1].Err)
	}
	if woken.Load() != 3 {
		t.Fatalf("OnAppend saw next %d, want 3", woken.Load())
	}
	if ids := readIDs(t, s, "s"); fmt.Sprint(ids) != "[first now-1 now-2]" {
		t.Fatalf("read %v", ids)
	}
	// Records that would start a new segment file go through the appender.
	big := encode(t, "s", "big", make([]byte, 900<<10))
	refused := false
	for range 20 {
		res, ok := s.tryAppendNow([][]byte{big})
		if !ok {
			refused = true
			break
		}
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		if n := len(s.msgLog.Segments()); n != 1 {
			t.Fatalf("an append now made the log %d segments", n)
		}
	}
	if !refused {
		t.Fatal("appended now past the end of the segment")
	}
	appendAll(t, s, big)
	if n := len(s.msgLog.Segments()); n != 2 {
		t.Fatalf("the appender left %d segments, want 2", n)
	}
}

// Appends now and queued appends from many goroutines interleave into one
// gap-free sequence per subject, every message stored once and readable.
func TestTryAppendNow_InterleavesWithTheAppender(t *testing.T) {
	opts := testOptions()
	opts.Flush = FlushAsync
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	appendAll(t, s, encode(t, "a", "seed-a", nil), encode(t, "b", "seed-b", nil))
	const workers, per = 4, 300
	var now atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				subject := []string{"a", "b"}[(w+i)%2]
				m := [][]byte{encode(t, subject, fmt.Sprintf("w%d-%d", w, i), []byte("x"))}
				if i%3 != 0 {
					if res, ok := s.tryAppendNow(m); ok {
						now.Add(1)
						if res[0].Err != nil {
							t.Error(res[0].Err)
						}
						continue
					}
				}
				if _, err := s.Append(context.Background(), m); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if now.Load() == 0 {
		t.Fatal("no append went the direct way")
	}
	seen := map[string]bool{}
	for _, subject := range []string{"a", "b"} {
		got, err := s.Read(subject, 0, workers*per)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range got {
			if p.ConsumeSeq != int64(i) {
				t.Fatalf("%s: entry %d has sequence %d", subject, i, p.ConsumeSeq)
			}
			id := msgID(t, p.Message)
			if seen[id] {
				t.Fatalf("%s stored twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != workers*per+2 {
		t.Fatalf("%d messages stored, want %d", len(seen), workers*per+2)
	}
}

// tryAppendViewsNow stores pre-parsed messages like tryAppendNow, leaves a
// message whose result already holds an error alone, touches no result when
// it refuses (a new subject), and allocates nothing for a lone message.
func TestTryAppendViewsNow(t *testing.T) {
	opts := testOptions()
	opts.Flush = FlushAsync
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	view := func(subject, id string) protocol.View {
		v, err := protocol.ParseMessage(encode(t, subject, id, []byte("body")))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	appendAll(t, s, encode(t, "s", "first", []byte("x")))
	rejected := errors.New("rejected by the caller")
	views := []protocol.View{view("s", "v-1"), view("s", "skipped"), view("s", "v-2")}
	results := []Result{{}, {Err: rejected}, {}}
	ok := false
	for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); {
		if ok = s.tryAppendViewsNow(views, results); !ok {
			time.Sleep(time.Millisecond)
		}
	}
	if !ok {
		t.Fatal("did not append now with the appender idle")
	}
	if results[0].Err != nil || results[2].Err != nil || results[0].Seq != 1 || results[2].Seq != 2 || results[1].Err != rejected {
		t.Fatalf("results %+v", results)
	}

	fresh := []Result{{Seq: 99}}
	if s.tryAppendViewsNow([]protocol.View{view("new", "n-1")}, fresh) {
		t.Fatal("appended now to a subject the store does not have yet")
	}
	if fresh[0].Seq != 99 {
		t.Fatalf("a refused append changed its result: %+v", fresh[0])
	}

	one := []protocol.View{view("s", "again")}
	res := make([]Result, 1)
	allocs := testing.AllocsPerRun(50, func() {
		res[0] = Result{}
		if !s.tryAppendViewsNow(one, res) || res[0].Err != nil {
			t.Fatalf("append now: %+v", res[0])
		}
	})
	if allocs != 0 && !raceEnabled {
		t.Errorf("a lone append now allocated %.1f times", allocs)
	}
	got, err := s.Read("s", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range got[:3] {
		ids = append(ids, msgID(t, p.Message))
	}
	if fmt.Sprint(ids) != "[first v-1 v-2]" || len(got) != 3+51 {
		t.Fatalf("read %v (%d entries)", ids, len(got))
	}
}

// TryWriteViewsNow writes without publishing: the results are set and the
// records are in the log, but nothing is readable, OnAppend has not fired
// and other appends wait, until Written.Publish; Close waits for it too.
// The pair allocates nothing.
func TestTryWriteViewsNow_Publish(t *testing.T) {
	opts := testOptions()
	opts.Flush = FlushAsync
	var woken atomic.Int64
	opts.OnAppend = func(subject string, next int64) { woken.Store(next) }
	s := openStore(t, t.TempDir(), opts)
	s.Watch("s")
	appendAll(t, s, encode(t, "s", "first", []byte("x")))
	v, err := protocol.ParseMessage(encode(t, "s", "written", []byte("body")))
	if err != nil {
		t.Fatal(err)
	}
	views, results := []protocol.View{v}, make([]Result, 1)
	var w Written
	ok := false
	for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); {
		if w, ok = s.TryWriteViewsNow(views, results); !ok {
			time.Sleep(time.Millisecond)
		}
	}
	if !ok {
		t.Fatal("did not write now with the appender idle")
	}
	if results[0].Err != nil || results[0].Seq != 1 {
		t.Fatalf("results %+v", results)
	}
	if got, err := s.Read("s", 0, 10); err != nil || len(got) != 1 {
		t.Fatalf("before Publish: read %d entries (%v), want only the first", len(got), err)
	}
	if woken.Load() != 1 {
		t.Fatalf("OnAppend saw next %d before Publish", woken.Load())
	}
	if s.tryAppendViewsNow(views, make([]Result, 1)) {
		t.Fatal("appended now while a write waited to be published")
	}
	queued := make(chan []Result, 1)
	if err := appendRaw(s, [][]byte{encode(t, "s", "queued", nil)}, func(r []Result) { queued <- r }); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let the appender reach the writer lock
		closed <- s.Close()
	}()
	select {
	case r := <-queued:
		t.Fatalf("a queued append finished while a write waited to be published: %+v", r)
	case err := <-closed:
		t.Fatalf("Close returned while a write waited to be published: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	w.Publish()
	if r := <-queued; r[0].Err != nil || r[0].Seq != 2 {
		t.Fatalf("the queued append after Publish: %+v", r)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if woken.Load() != 3 {
		t.Fatalf("OnAppend saw next %d, want 3", woken.Load())
	}

	// Reopened, the store has all three, in order; the pair allocates nothing.
	s = openStore(t, s.dir, opts)
	defer s.Close()
	if ids := readIDs(t, s, "s"); fmt.Sprint(ids) != "[first written queued]" {
		t.Fatalf("read %v", ids)
	}
	allocs := testing.AllocsPerRun(50, func() {
		results[0] = Result{}
		w, ok := s.TryWriteViewsNow(views, results)
		if !ok || results[0].Err != nil {
			t.Fatalf("write now: %+v", results[0])
		}
		w.Publish()
	})
	if allocs != 0 && !raceEnabled {
		t.Errorf("a lone write and publish allocated %.1f times", allocs)
	}
}

// AppendAsync takes its caller's views as checked: a known subject's
// messages are not checked again (a view of bytes whose CRC no longer
// matches is stored as it is), while a message for a subject the store does
// not have is checked against its Limits before the subject is created;
// Views (Append's check) refuses both.
func TestAppendAsync_TakesCheckedViews(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	appendAll(t, s, encode(t, "a", "first", []byte("x")))

	flipped := encode(t, "a", "flipped", []byte("body"))
	flipped[len(flipped)-1] ^= 0xff // the CRC no longer matches
	wide := protocol.DefaultLimits
	wide.MaxSubject = 1000
	long, err := protocol.AppendMessage(nil, &protocol.Message{Subject: strings.Repeat("n", 250), ID: "long", Body: []byte("x"), Created: time.UnixMilli(1)}, wide)
	if err != nil {
		t.Fatal(err)
	}
	msgs := [][]byte{flipped, long, encode(t, "b", "new", []byte("y"))}
	run := func(views []protocol.View, results []Result) []Result {
		done := make(chan []Result, 1)
		if err := s.AppendAsync(views, results, func(r []Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
	_, checked := Views(msgs, s.opts.Limits)
	if checked[0].Err == nil || checked[1].Err == nil || checked[2].Err != nil {
		t.Fatalf("Views: %v, %v, %v; want the bad CRC and the long subject refused", checked[0].Err, checked[1].Err, checked[2].Err)
	}
	// Views parsed by a caller with other limits (and no CRC check).
	views := make([]protocol.View, len(msgs))
	for i, m := range msgs {
		if views[i], err = protocol.ParseMessageNoCRC(m); err != nil {
			t.Fatal(err)
		}
	}
	taken := run(views, make([]Result, len(views)))
	if taken[0].Err != nil {
		t.Fatalf("a known subject's message was checked again: %v", taken[0].Err)
	}
	if taken[1].Err == nil {
		t.Fatal("a message for a new subject over the limits was stored")
	}
	if taken[2].Err != nil {
		t.Fatal(taken[2].Err)
	}
	if got := pullAll(t, s, "a", "g"); len(got) != 2 || got["flipped"] == nil {
		t.Fatalf("subject a holds %d messages, want first and flipped", len(got))
	}
	// A result that holds an error already is passed through, its view skipped.
	refused := errors.New("refused by the caller")
	r := run([]protocol.View{views[2]}, []Result{{Err: refused}})
	if r[0].Err != refused {
		t.Fatalf("a pre-refused message: %+v", r[0])
	}
	if got := pullAll(t, s, "b", "g"); len(got) != 1 {
		t.Fatalf("subject b holds %d messages, want 1", len(got))
	}
}
