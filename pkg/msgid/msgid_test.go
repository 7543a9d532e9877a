package msgid

import (
	"sort"
	"sync"
	"testing"
	"time"
)

func TestNext_SortedAndUnique(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	g := New(func() time.Time { return now })
	ids := make([]string, 0, 10000)
	for i := range 10000 {
		if i%1000 == 0 {
			now = now.Add(time.Millisecond)
		}
		if i == 5000 {
			now = now.Add(-time.Second) // a clock step back keeps order
		}
		ids = append(ids, g.Next())
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids from one generator are not sorted")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if len(id) != Size || seen[id] {
			t.Fatalf("bad or duplicate id %q", id)
		}
		seen[id] = true
	}
}

func TestNext_ConcurrentUnique(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				id := Next()
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate %s", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestTime(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_123)
	g := New(func() time.Time { return at })
	got, ok := Time(g.Next())
	if !ok || !got.Equal(at) {
		t.Fatalf("Time = %v %v, want %v", got, ok, at)
	}
	if _, ok := Time("not-an-id"); ok {
		t.Fatal("Time accepted garbage")
	}
}

func BenchmarkNext(b *testing.B) {
	g := New(nil)
	buf := make([]byte, 0, Size)
	b.ReportAllocs()
	for b.Loop() {
		buf = g.AppendNext(buf[:0])
	}
}
