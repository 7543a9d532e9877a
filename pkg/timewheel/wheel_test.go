package timewheel

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

func mustNew(t testing.TB, tick time.Duration, slots int, now int64) *Wheel[int] {
	t.Helper()
	w, err := New[int](tick, slots, now)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestNew_Validates(t *testing.T) {
	if _, err := New[int](0, 8, 0); err == nil {
		t.Fatal("tick 0 accepted")
	}
	if _, err := New[int](time.Second, 0, 0); err == nil {
		t.Fatal("0 slots accepted")
	}
	w := mustNew(t, time.Second, 5, 0)
	if w.Slots() != 8 {
		t.Fatalf("slots = %d, want 8", w.Slots())
	}
}

func TestWheel_ExactWithinTick(t *testing.T) {
	w := mustNew(t, 500*time.Millisecond, 16, 1000)
	w.Add(1300, 1)
	w.Add(1100, 2)
	w.Add(1499, 3)
	if d, ok := w.NextDue(); !ok || d != 1100 {
		t.Fatalf("NextDue = %d %v, want 1100", d, ok)
	}
	var got []int
	collect := func(due int64, v int) { got = append(got, v) }
	if n := w.Expire(1099, 0, collect); n != 0 {
		t.Fatalf("expired %d entries before their time", n)
	}
	w.Expire(1100, 0, collect)
	w.Expire(1299, 0, collect)
	if len(got) != 1 || got[0] != 2 {
		t.Fatalf("got %v, want [2]", got)
	}
	w.Expire(1500, 0, collect)
	if len(got) != 3 || got[1] != 1 || got[2] != 3 {
		t.Fatalf("got %v, want [2 1 3]", got)
	}
	if w.Len() != 0 {
		t.Fatalf("Len = %d", w.Len())
	}
}

func TestWheel_PastEntriesFireAtOnce(t *testing.T) {
	w := mustNew(t, 500*time.Millisecond, 16, 100_000)
	w.Add(5, 1)
	w.Add(-7, 2)
	var got []int
	w.Expire(100_000, 0, func(due int64, v int) { got = append(got, v) })
	if len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("got %v, want [2 1]", got)
	}
}

func TestWheel_MaxLimitsAndResumes(t *testing.T) {
	w := mustNew(t, 500*time.Millisecond, 8, 0)
	for i := 0; i < 100; i++ {
		w.Add(int64(i*37), i)
	}
	var got []int
	for w.Len() > 0 {
		n := w.Expire(10_000, 7, func(due int64, v int) { got = append(got, v) })
		if n == 0 || n > 7 {
			t.Fatalf("Expire returned %d", n)
		}
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("order broken at %d: %v", i, got)
		}
	}
}

// TestWheel_MatchesReference drives the wheel with random adds and a clock
// that moves forward in small and huge steps and sometimes jumps back, and
// checks every expiry against a sorted reference list.
func TestWheel_MatchesReference(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	now := int64(1_700_000_000_000)
	w := mustNew(t, 500*time.Millisecond, 64, now) // one rotation = 32 s
	type ref struct {
		due int64
		id  int
	}
	var pending []ref
	next := 0
	for step := 0; step < 5000; step++ {
		for k := rng.Intn(20); k > 0; k-- {
			var due int64
			switch rng.Intn(4) {
			case 0:
				due = now - int64(rng.Intn(100_000)) // past
			case 1:
				due = now + int64(rng.Intn(1000))
			case 2:
				due = now + int64(rng.Intn(60_000)) // beyond a rotation sometimes
			default:
				due = now + int64(rng.Intn(10_000_000)) // far overflow
			}
			w.Add(due, next)
			pending = append(pending, ref{due, next})
			next++
		}
		switch r := rng.Intn(100); {
		case r < 5:
			now -= int64(rng.Intn(5000)) // clock jumps back
		case r < 8:
			now += int64(rng.Intn(20_000_000)) // jumps far forward
		default:
			now += int64(rng.Intn(700))
		}
		sort.SliceStable(pending, func(i, j int) bool { return pending[i].due < pending[j].due })
		var want []ref
		for len(pending) > 0 && pending[0].due <= now {
			want = append(want, pending[0])
			pending = pending[1:]
		}
		var got []ref
		max := 0
		if rng.Intn(3) == 0 {
			max = 1 + rng.Intn(5)
		}
		for {
			n := w.Expire(now, max, func(due int64, v int) {
				if due > now {
					t.Fatalf("seed %d: entry %d due %d fired at %d (early)", seed, v, due, now)
				}
				got = append(got, ref{due, v})
			})
			if n == 0 || max == 0 {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d step %d: expired %d entries, want %d", seed, step, len(got), len(want))
		}
		for i := range got {
			if got[i].due != want[i].due {
				t.Fatalf("seed %d step %d: entry %d due %d, want due %d", seed, step, i, got[i].due, want[i].due)
			}
		}
		if w.Len() != len(pending) {
			t.Fatalf("Len = %d, want %d", w.Len(), len(pending))
		}
		d, ok := w.NextDue()
		if ok != (len(pending) > 0) || (ok && d != pending[0].due) {
			t.Fatalf("seed %d step %d: NextDue = %d %v, want %v", seed, step, d, ok, pending)
		}
	}
}

func TestWheel_BurstInOneSecond(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	w := mustNew(t, 500*time.Millisecond, 8192, 0)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < n; i++ {
		w.Add(60_000+int64(rng.Intn(1000)), i)
	}
	last := int64(-1)
	fired := 0
	for now := int64(60_000); now <= 61_000; now++ {
		w.Expire(now, 0, func(due int64, v int) {
			if due < last || due > now {
				t.Fatalf("due %d after %d at %d", due, last, now)
			}
			last = due
			fired++
		})
	}
	if fired != n {
		t.Fatalf("fired %d of %d", fired, n)
	}
}

func BenchmarkWheel_AddExpire(b *testing.B) {
	w := mustNew(b, 500*time.Millisecond, 8192, 0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		w.Add(int64(i%1_000_000), i)
	}
	w.Expire(1_000_000, 0, func(int64, int) {})
}
