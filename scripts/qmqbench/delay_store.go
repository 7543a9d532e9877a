package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Suite delay-store measures the delay server's storage core alone (no
// network), with the real clock:
//
//   - append throughput with FlushSync, one message per Append from 64
//     goroutines and batches of 100 from 16 goroutines;
//   - fire lateness: 100,000 messages due uniformly 3–13 s ahead; lateness is
//     the time a batch arrives on Due minus the message's due time;
//   - memory per message loaded in the wheel, and the time to hand out
//     1,000,000 messages due in the same second;
//   - resident memory with 2,000,000 messages pending over 30 days (or
//     QMQ_BENCH_DELAY_PENDING), and the time to reopen that store.
//
// It reports figures; it has no targets of its own.
func init() { register("delay-store", runDelayStore) }

func runDelayStore(env *Env) error {
	if err := benchDelayCapacity(env); err != nil {
		return err
	}
	if err := benchDelayAppend(env); err != nil {
		return err
	}
	if err := benchDelayLateness(env); err != nil {
		return err
	}
	return benchDelayBurst(env)
}

func delayMessage(id string, due time.Time) []byte {
	m := &protocol.Message{Subject: "bench", ID: id, Body: make([]byte, 64), Created: time.Now(), DeliverAt: due}
	b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		panic(err)
	}
	return b
}

// drainDue calls fn for each batch as it arrives and marks the batch
// dispatched from another goroutine, as the server's forwarders do once the
// realtime broker has acknowledged: the Due reader is never held up by
// dispatch-log writes.
func drainDue(s *store.Store, fn func(now time.Time, batch []store.Due)) chan struct{} {
	done := make(chan struct{})
	marks := make(chan []store.Ref, 1024)
	go func() {
		defer close(done)
		for refs := range marks {
			s.MarkDispatched(refs)
		}
	}()
	go func() {
		defer close(marks)
		for batch := range s.Due() {
			now := time.Now()
			if fn != nil {
				fn(now, batch)
			}
			refs := make([]store.Ref, len(batch))
			for i, d := range batch {
				refs[i] = d.Ref
			}
			marks <- refs
		}
	}()
	return done
}

func benchDelayAppend(env *Env) error {
	for _, c := range []struct {
		name    string
		workers int
		batch   int
	}{
		{"delay_store_append_sync_msgs_per_s", 64, 1},
		{"delay_store_append_sync_batch100_msgs_per_s", 16, 100},
	} {
		s, err := store.Open(filepath.Join(env.Dir, c.name), store.Options{}, nil, nil)
		if err != nil {
			return err
		}
		done := drainDue(s, nil)
		due := time.Now().Add(time.Hour)
		var total atomic.Int64
		var failed atomic.Int64
		stop := time.Now().Add(3 * time.Second)
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < c.workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				msgs := make([][]byte, c.batch)
				for seq := 0; time.Now().Before(stop); seq++ {
					for i := range msgs {
						msgs[i] = delayMessage(fmt.Sprintf("w%d-%d-%d", w, seq, i), due)
					}
					for _, r := range s.AppendWait(msgs) {
						if r.Err != nil {
							failed.Add(1)
						}
					}
					total.Add(int64(c.batch))
				}
			}(w)
		}
		wg.Wait()
		elapsed := time.Since(start)
		if err := s.Close(); err != nil {
			return err
		}
		<-done
		if failed.Load() > 0 {
			return fmt.Errorf("%s: %d appends failed", c.name, failed.Load())
		}
		env.Metric(c.name, float64(total.Load())/elapsed.Seconds(), "msg/s")
	}
	return nil
}

func benchDelayLateness(env *Env) error {
	const n = 100_000
	s, err := store.Open(filepath.Join(env.Dir, "lateness"), store.Options{}, nil, nil)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	lateness := make([]float64, 0, n)
	early := 0
	done := drainDue(s, func(now time.Time, batch []store.Due) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range batch {
			l := float64(now.UnixNano()-d.DueMillis*int64(time.Millisecond)) / 1e6
			if l < 0 {
				early++
			}
			lateness = append(lateness, l)
		}
	})
	base := time.Now().Add(3 * time.Second)
	// Control: plain timers aimed at instants of the same window show what
	// the machine's scheduling alone costs.
	control := make(chan []float64, 1)
	go func() {
		var late []float64
		for i := 0; i < 2000; i++ {
			at := base.Add(time.Duration(i) * 5 * time.Millisecond)
			time.Sleep(time.Until(at))
			late = append(late, float64(time.Since(at).Nanoseconds())/1e6)
		}
		control <- late
	}()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			msgs := make([][]byte, 0, 100)
			for i := w; i < n; i += 16 {
				due := base.Add(time.Duration(i) * 10 * time.Second / n)
				msgs = append(msgs, delayMessage(fmt.Sprintf("l%d", i), due))
				if len(msgs) == cap(msgs) {
					s.AppendWait(msgs)
					msgs = msgs[:0]
				}
			}
			if len(msgs) > 0 {
				s.AppendWait(msgs)
			}
		}(w)
	}
	wg.Wait()
	if time.Now().After(base) {
		env.Logf("appending took past the first due time; early figures include catch-up")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		got := len(lateness)
		mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Close()
	<-done
	if len(lateness) < n {
		return fmt.Errorf("lateness: %d of %d messages came out", len(lateness), n)
	}
	sort.Float64s(lateness)
	env.Metric("delay_store_lateness_p50_ms", lateness[len(lateness)/2], "ms")
	env.Metric("delay_store_lateness_p99_ms", lateness[len(lateness)*99/100], "ms")
	env.Metric("delay_store_lateness_max_ms", lateness[len(lateness)-1], "ms")
	env.Metric("delay_store_early_count", float64(early), "msg")
	ctl := <-control
	sort.Float64s(ctl)
	env.Metric("delay_store_lateness_control_timer_p99_ms", ctl[len(ctl)*99/100], "ms")
	return nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func benchDelayBurst(env *Env) error {
	const n = 1_000_000
	s, err := store.Open(filepath.Join(env.Dir, "burst"), store.Options{}, nil, nil)
	if err != nil {
		return err
	}
	var got atomic.Int64
	var lastAt atomic.Int64
	var early atomic.Int64
	done := drainDue(s, func(now time.Time, batch []store.Due) {
		for _, d := range batch {
			if now.UnixMilli() < d.DueMillis {
				early.Add(1)
			}
		}
		got.Add(int64(len(batch)))
		lastAt.Store(now.UnixNano())
	})
	before := heapInUse()
	// Every message is due within one second, 60 s from now: inside the
	// window, so each goes into the wheel as it is replayed.
	second := time.Now().Add(60 * time.Second).Truncate(time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			msgs := make([][]byte, 0, 500)
			for i := w; i < n; i += 16 {
				msgs = append(msgs, delayMessage(fmt.Sprintf("b%d", i), second.Add(time.Duration(i%1000)*time.Millisecond)))
				if len(msgs) == cap(msgs) {
					s.AppendWait(msgs)
					msgs = msgs[:0]
				}
			}
			if len(msgs) > 0 {
				s.AppendWait(msgs)
			}
		}(w)
	}
	wg.Wait()
	appendTime := time.Since(start)
	for s.Stats().InWheel < n && time.Now().Before(second) {
		time.Sleep(10 * time.Millisecond)
	}
	inWheel := s.Stats().InWheel
	after := heapInUse()
	if inWheel == n {
		env.Metric("delay_store_wheel_bytes_per_entry", float64(after-before)/float64(n), "B")
	} else {
		env.Logf("only %d of %d entries were in the wheel before they fell due; no memory figure", inWheel, n)
	}
	env.Logf("appended %d messages in %v", n, appendTime)
	late := time.Now().After(second)
	if late {
		env.Logf("burst: appending and loading took past the due second (%v); the machine is too busy for a burst figure", time.Since(start))
	}
	deadline := second.Add(120 * time.Second)
	for got.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s.Close()
	<-done
	if got.Load() < n {
		return fmt.Errorf("burst: %d of %d messages came out", got.Load(), n)
	}
	if !late {
		env.Metric("delay_store_burst_1m_seconds", float64(lastAt.Load()-second.UnixNano())/1e9, "s")
	}
	env.Metric("delay_store_burst_early_count", float64(early.Load()), "msg")
	return nil
}

// rssMB returns the process's resident set from /proc/self/status.
func rssMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// benchDelayCapacity measures the resident memory with n messages pending
// over 30 days: 2,000,000 unless QMQ_BENCH_DELAY_PENDING says otherwise
// (e.g. 10000000; the figure is then named after that count).
func benchDelayCapacity(env *Env) error {
	n := 2_000_000
	if v := os.Getenv("QMQ_BENCH_DELAY_PENDING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			return fmt.Errorf("QMQ_BENCH_DELAY_PENDING=%q", v)
		}
	}
	label := fmt.Sprintf("%dm", n/1_000_000)
	if n < 1_000_000 {
		label = fmt.Sprintf("%dk", n/1000)
	}
	dir := filepath.Join(env.Dir, "capacity")
	s, err := store.Open(dir, store.Options{}, nil, nil)
	if err != nil {
		return err
	}
	done := drainDue(s, nil)
	base := time.Now().Add(time.Hour)
	span := 30 * 24 * time.Hour
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			msgs := make([][]byte, 0, 500)
			flush := func() {
				for _, r := range s.AppendWait(msgs) {
					if r.Err != nil {
						failed.Add(1)
					}
				}
				msgs = msgs[:0]
			}
			for i := w; i < n; i += 16 {
				due := base.Add(span / time.Duration(n) * time.Duration(i))
				msgs = append(msgs, delayMessage(fmt.Sprintf("c%d", i), due))
				if len(msgs) == cap(msgs) {
					flush()
				}
			}
			if len(msgs) > 0 {
				flush()
			}
		}(w)
	}
	wg.Wait()
	if failed.Load() > 0 {
		return fmt.Errorf("capacity: %d appends failed", failed.Load())
	}
	if err := s.Sync(); err != nil {
		return err
	}
	env.Logf("appended %d messages over 30 days in %v", n, time.Since(start))
	st := s.Stats()
	debug.FreeOSMemory()
	env.Metric("delay_store_rss_mb_"+label+"_pending_30d", rssMB(), "MB")
	env.Logf("pending %d in %d hours, %d in the wheel, heap in use %.1f MB", st.Pending, len(st.Hours), st.InWheel, float64(heapInUse())/(1<<20))
	if err := s.Close(); err != nil {
		return err
	}
	<-done
	start = time.Now()
	s, err = store.Open(dir, store.Options{}, nil, nil)
	if err != nil {
		return err
	}
	env.Metric("delay_store_reopen_ms_"+label+"_pending", float64(time.Since(start).Microseconds())/1000, "ms")
	done = drainDue(s, nil)
	s.Close()
	<-done
	os.RemoveAll(dir)
	return nil
}
