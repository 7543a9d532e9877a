package store

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentStress runs appenders, consumers of two groups (some of which
// die and hand their entries back), checkpoints and reopens concurrently, and
// checks at-least-once delivery: every message reaches every group.
func TestConcurrentStress(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.CheckpointInterval = 20 * time.Millisecond
	opts.ActionFlushInterval = 5 * time.Millisecond
	opts.ConsumeSegmentEntries = 256
	opts.PullSegmentEntries = 128
	s := openStore(t, dir, opts)
	defer func() { s.Close() }()
	groups := []string{"g1", "g2"}
	for _, g := range groups {
		pull(t, s, PullRequest{Subject: "st", Group: g, Consumer: "init", Earliest: true})
	}
	const appenders, perAppender = 4, 60
	var wg sync.WaitGroup
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			for i := 0; i < perAppender; i++ {
				var msgs [][]byte
				for k := 0; k < 5; k++ {
					msgs = append(msgs, encode(t, "st", fmt.Sprintf("a%d-%d-%d", a, i, k), nil))
				}
				res, err := s.Append(context.Background(), msgs)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range res {
					if r.Err != nil {
						t.Error(r.Err)
					}
				}
			}
		}(a)
	}
	total := appenders * perAppender * 5
	var mu sync.Mutex
	seen := map[string]map[string]bool{"g1": {}, "g2": {}}
	var stop atomic.Bool
	var cw sync.WaitGroup
	for _, g := range groups {
		for c := 0; c < 3; c++ {
			cw.Add(1)
			go func(g string, c int) {
				defer cw.Done()
				rng := rand.New(rand.NewSource(int64(c)))
				id := fmt.Sprint("c", c)
				known := int64(-1)
				for !stop.Load() {
					r, err := s.Pull(PullRequest{Subject: "st", Group: g, Consumer: id, Max: 1 + rng.Intn(20), KnownPullSeq: known})
					if err != nil {
						t.Error(err)
						return
					}
					if len(r.Messages) == 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					mu.Lock()
					for _, m := range r.Messages {
						seen[g][msgID(t, m.Message)] = true
					}
					mu.Unlock()
					last := r.Messages[len(r.Messages)-1].PullSeq
					known = max(known, last)
					switch rng.Intn(10) {
					case 0: // dies: its un-acked entries go to the others
						if _, err := s.ReturnUnacked("st", g, id); err != nil {
							t.Error(err)
						}
						known = -1
					case 1: // loses an ack
					default:
						if _, err := s.Ack(AckRequest{Subject: "st", Group: g, Consumer: id, First: r.Messages[0].PullSeq, Last: last}); err != nil {
							t.Error(err)
						}
					}
				}
			}(g, c)
		}
	}
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := len(seen["g1"]) == total && len(seen["g2"]) == total
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	cw.Wait()
	for _, g := range groups {
		if len(seen[g]) != total {
			t.Fatalf("group %s received %d of %d messages", g, len(seen[g]), total)
		}
	}
	// State survives a clean reopen.
	want := stripSeen(s.Stats().Groups)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, opts)
	if got := stripSeen(s.Stats().Groups); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reopen\n got %+v\nwant %+v", got, want)
	}
}
