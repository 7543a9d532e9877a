package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestSubjectTable fills the table past several doublings and finds every
// subject by bytes and by string, and no subject it does not hold.
func TestSubjectTable(t *testing.T) {
	var tab subjectTable
	if tab.lookup([]byte("a")) != nil || tab.lookupString("a") != nil {
		t.Fatal("empty table found a subject")
	}
	const n = 5000
	subjects := make([]*subject, n)
	for i := range subjects {
		subjects[i] = &subject{name: fmt.Sprint("s.", i)}
		tab.insert(subjects[i])
	}
	for i, sj := range subjects {
		if got := tab.lookup([]byte(sj.name)); got != sj {
			t.Fatalf("lookup %s: got %v", sj.name, got)
		}
		if got := tab.lookupString(sj.name); got != sj {
			t.Fatalf("lookupString %s: got %v", sj.name, got)
		}
		if got := tab.lookupString(fmt.Sprint("t.", i)); got != nil {
			t.Fatalf("found absent t.%d: %s", i, got.name)
		}
	}
	if slots := len(*tab.slots.Load()); 4*n > 3*slots || slots&(slots-1) != 0 {
		t.Fatalf("%d slots for %d subjects", slots, n)
	}
}

// TestSubjectTableConcurrent reads the table while its writer fills it
// (run under -race): a reader finds every subject inserted before it
// looked, whichever array it loads.
func TestSubjectTableConcurrent(t *testing.T) {
	var tab subjectTable
	const n = 3000
	var inserted atomic.Int64
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for inserted.Load() < n {
				k := inserted.Load()
				if k == 0 {
					continue
				}
				i := (k*7 + int64(r)) % k
				name := fmt.Sprint("s.", i)
				if sj := tab.lookup([]byte(name)); sj == nil || sj.name != name {
					t.Errorf("subject %s inserted but not found", name)
					return
				}
			}
		}()
	}
	for i := range n {
		tab.insert(&subject{name: fmt.Sprint("s.", i)})
		inserted.Store(int64(i + 1))
	}
	wg.Wait()
}

// BenchmarkSubjectLookup finds 10,000 subjects by their names' bytes in a
// scattered order, from every core at once as the event loops do: the
// subject table against the map under subjectsMu's read lock that it
// replaced.
func BenchmarkSubjectLookup(b *testing.B) {
	const n = 10000
	var tab subjectTable
	var mu sync.RWMutex
	m := map[string]*subject{}
	names := make([][]byte, n)
	for i := range n {
		sj := &subject{name: fmt.Sprint("bench.s", i)}
		tab.insert(sj)
		m[sj.name] = sj
	}
	for i := range names {
		names[i] = []byte(fmt.Sprint("bench.s", (i*7919)%n))
	}
	b.Run("table", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if tab.lookup(names[i%n]) == nil {
					b.Fatal("not found")
				}
				i++
			}
		})
	})
	b.Run("map", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				mu.RLock()
				sj := m[string(names[i%n])]
				mu.RUnlock()
				if sj == nil {
					b.Fatal("not found")
				}
				i++
			}
		})
	})
}
