package store

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestWatch: OnAppend is called for the commits of watched subjects only,
// whether the watch came before the subject existed or after, under both
// flush policies, and a watch survives nothing past Close (a reopened store
// calls nothing until watched again).
func TestWatch(t *testing.T) {
	for _, flush := range []FlushPolicy{FlushSync, FlushAsync} {
		t.Run(string(flush), func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			var notified []string
			opts := testOptions()
			opts.Flush = flush
			opts.OnAppend = func(subject string, next int64) {
				mu.Lock()
				notified = append(notified, subject)
				mu.Unlock()
			}
			// take returns the subjects notified so far. OnAppend runs after
			// the appends' callbacks: take appends to the watched subject
			// "end" and waits for its call, which follows every earlier
			// commit's.
			var s *Store
			take := func() []string {
				t.Helper()
				appendAll(t, s, encode(t, "end", "end", []byte("x")))
				deadline := time.Now().Add(10 * time.Second)
				for {
					mu.Lock()
					got := notified
					if slices.Contains(got, "end") {
						notified = nil
						mu.Unlock()
						slices.Sort(got)
						got = slices.DeleteFunc(slices.Compact(got), func(n string) bool { return n == "end" })
						return got
					}
					mu.Unlock()
					if time.Now().After(deadline) {
						t.Fatal("OnAppend never called for the watched subject end")
					}
					time.Sleep(time.Millisecond)
				}
			}
			s = openStore(t, dir, opts)
			s.Watch("end")
			s.Watch("early") // before the subject exists
			appendAll(t, s, encode(t, "early", "1", []byte("x")), encode(t, "late", "2", []byte("x")))
			if got := take(); !slices.Equal(got, []string{"early"}) {
				t.Fatalf("notified %v, want [early]", got)
			}
			s.Watch("late") // an existing subject
			appendAll(t, s, encode(t, "late", "3", []byte("x")), encode(t, "other", "4", []byte("x")))
			if got := take(); !slices.Equal(got, []string{"late"}) {
				t.Fatalf("notified %v, want [late]", got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, opts)
			defer s.Close()
			s.Watch("end")
			appendAll(t, s, encode(t, "early", "5", []byte("x")))
			if got := take(); len(got) != 0 {
				t.Fatalf("reopened store notified %v before any watch", got)
			}
			s.Watch("early")
			appendAll(t, s, encode(t, "early", "6", []byte("x")))
			if got := take(); !slices.Equal(got, []string{"early"}) {
				t.Fatalf("notified %v, want [early]", got)
			}
		})
	}
}
