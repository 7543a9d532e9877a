package producer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/route"
)

// countingResolver counts the Resolve calls per subject.
type countingResolver struct {
	route.Resolver
	mu    sync.Mutex
	calls map[string]int
}

func (r *countingResolver) Resolve(ctx context.Context, req route.Request) ([]route.Group, error) {
	r.mu.Lock()
	r.calls[req.Subject]++
	r.mu.Unlock()
	return r.Resolver.Resolve(ctx, req)
}

func (r *countingResolver) count(subject string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[subject]
}

// Messages spread over many subjects: each subject's route is resolved once
// per routeTTL, and each subject's messages go round-robin over the groups,
// its position carrying on when its route is refreshed.
func TestSendAsync_ManySubjectsRouteCache(t *testing.T) {
	b1, b2 := startFakeBroker(t), startFakeBroker(t)
	res := &countingResolver{Resolver: route.NewStatic(route.Groups(b1.addr(), b2.addr()), nil), calls: map[string]int{}}
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	p := newProducer(t, WithResolver(res), withClock(now), WithBatch(64, 1<<20))
	const subjects, perRound, rounds = 500, 4, 3
	send := func(round int) {
		var wg sync.WaitGroup
		var failed atomic.Int32
		wg.Add(subjects * perRound)
		for k := range perRound {
			for s := range subjects {
				body := []byte(strconv.Itoa(round*perRound + k))
				err := p.SendAsync(&Message{Subject: fmt.Sprint("s", s), Body: body}, func(_ *Message, err error) {
					if err != nil {
						failed.Add(1)
					}
					wg.Done()
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("round %d: %d sends failed", round, failed.Load())
		}
	}
	for round := range rounds {
		send(round)
		for s := range subjects {
			if got := res.count(fmt.Sprint("s", s)); got != round+1 {
				t.Fatalf("round %d: subject s%d resolved %d times, want %d", round, s, got, round+1)
			}
		}
		clock.Add(int64(routeTTL)) // every route is due for a refresh
	}
	// groupOf[subject][k]: the broker that stored message k of subject.
	groupOf := map[string][]int{}
	for i, b := range []*fakeBroker{b1, b2} {
		b.mu.Lock()
		for _, m := range b.stored {
			k, _ := strconv.Atoi(string(m.Body))
			g := groupOf[m.Subject]
			if g == nil {
				g = make([]int, perRound*rounds)
				for j := range g {
					g[j] = -1
				}
				groupOf[m.Subject] = g
			}
			g[k] = i
		}
		b.mu.Unlock()
	}
	if len(groupOf) != subjects {
		t.Fatalf("%d subjects stored, want %d", len(groupOf), subjects)
	}
	for subject, g := range groupOf {
		for k := range g {
			if g[k] < 0 {
				t.Fatalf("%s: message %d not stored", subject, k)
			}
			if k > 0 && g[k] == g[k-1] {
				t.Fatalf("%s: messages %d and %d both went to group %d (round-robin broken): %v", subject, k-1, k, g[k], g)
			}
		}
	}
}

// subjectFreeResolver is a countingResolver whose answers do not depend on
// the subject (as route.Static's do).
type subjectFreeResolver struct{ *countingResolver }

func (subjectFreeResolver) SubjectFree() bool { return true }

// With a resolver whose answer is the same for every subject (WithBrokers),
// the producer keeps one route for all subjects: it asks once per routeTTL
// whatever the number of subjects, and every message, whatever its subject,
// takes the next group in turn.
func TestSendAsync_SubjectFreeResolverSharesOneRoute(t *testing.T) {
	b1, b2 := startFakeBroker(t), startFakeBroker(t)
	res := subjectFreeResolver{&countingResolver{Resolver: route.NewStatic(route.Groups(b1.addr(), b2.addr()), nil), calls: map[string]int{}}}
	if !route.IsSubjectFree(res) || !route.IsSubjectFree(route.NewStatic(nil, nil)) || route.IsSubjectFree(res.countingResolver) {
		t.Fatal("IsSubjectFree does not tell the resolvers apart")
	}
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	// Batches of one message, so that each message picks its group.
	p := newProducer(t, WithResolver(res), withClock(now), WithBatch(1, 1<<20))
	const subjects, rounds = 300, 2
	for round := range rounds {
		for s := range subjects {
			if err := p.Send(context.Background(), &Message{Subject: fmt.Sprint("s", s), Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		for s := range subjects {
			calls += res.count(fmt.Sprint("s", s))
		}
		if calls != round+1 {
			t.Fatalf("round %d: %d Resolve calls for %d subjects, want %d", round, calls, subjects, round+1)
		}
		clock.Add(int64(routeTTL)) // the shared route is due for a refresh
	}
	n1, n2 := b1.count(), b2.count()
	if n1+n2 != subjects*rounds || n1 != n2 {
		t.Fatalf("brokers stored %d and %d messages, want %d each (one round-robin over all subjects)", n1, n2, subjects*rounds/2)
	}
}
