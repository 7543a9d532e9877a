package store

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// model is the simple in-memory picture of one group of one subject that
// the store must match.
type model struct {
	msgs      []string // ids by consume seq
	cursor    int64
	returned  []int64
	consumers map[string]*modelConsumer
}

type modelConsumer struct {
	pulled []int64 // consume seq by pull seq; -1 void
	acked  int64
}

type got struct {
	pullSeq, seq int64
	id           string
}

func (m *model) consumer(id string) *modelConsumer {
	c := m.consumers[id]
	if c == nil {
		c = &modelConsumer{acked: -1}
		m.consumers[id] = c
	}
	return c
}

func (m *model) pull(id string, max int, known int64) (out []got, redelivered bool) {
	c := m.consumer(id)
	known = maxI(known, c.acked)
	for int64(len(c.pulled)) <= known {
		c.pulled = append(c.pulled, -1)
	}
	next := int64(len(c.pulled))
	if next-1 > known {
		n := minI(next-1-known, int64(max))
		for i := int64(0); i < n; i++ {
			if v := c.pulled[known+1+i]; v >= 0 {
				out = append(out, got{known + 1 + i, v, m.msgs[v]})
			}
		}
		if len(out) > 0 {
			return out, true
		}
		if known == c.acked {
			c.acked = known + n
		}
		if next-1 > known+n {
			return nil, false
		}
	}
	var seqs []int64
	for len(m.returned) > 0 && len(seqs) < max {
		seqs = append(seqs, m.returned[0])
		m.returned = m.returned[1:]
	}
	for len(seqs) < max && m.cursor < int64(len(m.msgs)) {
		seqs = append(seqs, m.cursor)
		m.cursor++
	}
	for _, v := range seqs {
		out = append(out, got{int64(len(c.pulled)), v, m.msgs[v]})
		c.pulled = append(c.pulled, v)
	}
	return out, false
}

func (m *model) ack(id string, first, last int64) (gap []got) {
	c := m.consumer(id)
	if last <= c.acked {
		return nil
	}
	for int64(len(c.pulled)) <= last {
		c.pulled = append(c.pulled, -1)
	}
	for p := c.acked + 1; p < first; p++ {
		if v := c.pulled[p]; v >= 0 {
			gap = append(gap, got{p, v, m.msgs[v]})
		}
	}
	c.acked = last
	return gap
}

func (m *model) ret(id string) int {
	c := m.consumer(id)
	n := 0
	for p := c.acked + 1; p < int64(len(c.pulled)); p++ {
		if v := c.pulled[p]; v >= 0 {
			m.returned = append(m.returned, v)
			n++
		}
	}
	c.acked = int64(len(c.pulled)) - 1
	return n
}

func maxI(a, b int64) int64 { return max(a, b) }
func minI(a, b int64) int64 { return min(a, b) }

func toGot(t *testing.T, ps []Pulled) []got {
	var out []got
	for _, p := range ps {
		out = append(out, got{p.PullSeq, p.ConsumeSeq, msgID(t, p.Message)})
	}
	return out
}

// TestPropertyAgainstModel drives random appends, pulls (holding or
// dropping what was pulled), acks (contiguous and over gaps), consumer
// deaths and restarts against the store and the model and compares every
// answer.
func TestPropertyAgainstModel(t *testing.T) {
	seeds := 4
	steps := 600
	if testing.Short() {
		seeds, steps = 2, 400
	}
	for seed := 0; seed < seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(seed) + time.Now().UnixNano()%1000))
			dir := t.TempDir()
			opts := testOptions()
			opts.ConsumeSegmentEntries = 64
			opts.PullSegmentEntries = 32
			s := openStore(t, dir, opts)
			defer func() { s.Close() }()
			pull(t, s, PullRequest{Subject: "p", Group: "g", Consumer: "c0"})
			m := &model{consumers: map[string]*modelConsumer{}}
			m.consumer("c0")
			consumers := []string{"c0", "c1", "c2", "c3"}
			held := map[string]int64{} // highest pull seq each consumer holds
			for _, c := range consumers {
				held[c] = -1
			}
			n := 0
			for step := 0; step < steps; step++ {
				id := consumers[rng.Intn(len(consumers))]
				switch op := rng.Intn(100); {
				case op < 25:
					k := 1 + rng.Intn(20)
					var msgs [][]byte
					for i := 0; i < k; i++ {
						mid := fmt.Sprint("m", n)
						n++
						msgs = append(msgs, encode(t, "p", mid, nil))
						m.msgs = append(m.msgs, mid)
					}
					appendAll(t, s, msgs...)
				case op < 60:
					max := 1 + rng.Intn(15)
					known := held[id]
					if rng.Intn(4) == 0 {
						known = -1 // the consumer lost what it held
					}
					want, wantRe := m.pull(id, max, known)
					r, err := s.Pull(PullRequest{Subject: "p", Group: "g", Consumer: id, Max: max, KnownPullSeq: known})
					if err != nil {
						t.Fatal(err)
					}
					if g := toGot(t, r.Messages); fmt.Sprint(g) != fmt.Sprint(want) || (len(want) > 0 && r.Redelivered != wantRe) {
						t.Fatalf("step %d pull %s max %d known %d:\n got %v %v\nwant %v %v", step, id, max, known, g, r.Redelivered, want, wantRe)
					}
					if len(r.Messages) > 0 {
						held[id] = max64(held[id], r.Messages[len(r.Messages)-1].PullSeq)
					}
				case op < 85:
					c := m.consumer(id)
					next := int64(len(c.pulled))
					if next == 0 || c.acked >= next-1 {
						continue
					}
					first := c.acked + 1
					if rng.Intn(4) == 0 {
						first += int64(rng.Intn(int(next - c.acked))) // a lost ack: gap
					}
					first = min(first, next-1)
					last := first + int64(rng.Intn(int(next-first)))
					want := m.ack(id, first, last)
					r, err := s.Ack(AckRequest{Subject: "p", Group: "g", Consumer: id, First: first, Last: last})
					if err != nil {
						t.Fatal(err)
					}
					if g := toGot(t, r.Gap); fmt.Sprint(g) != fmt.Sprint(want) {
						t.Fatalf("step %d ack %s %d..%d gap:\n got %v\nwant %v", step, id, first, last, g, want)
					}
				case op < 92:
					if _, ok := m.consumers[id]; !ok {
						continue
					}
					want := m.ret(id)
					got, err := s.ReturnUnacked("p", "g", id)
					if errors.Is(err, ErrUnknownConsumer) && len(m.consumers[id].pulled) == 0 {
						err = nil // never pulled anything: nothing was persisted
					}
					if err != nil || got != want {
						t.Fatalf("step %d return %s: %d %v, want %d", step, id, got, err, want)
					}
					held[id] = m.consumers[id].acked
				case op < 96:
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = openStore(t, dir, opts)
				default:
					// A crash after everything was flushed loses nothing.
					if err := s.actions.flush(); err != nil {
						t.Fatal(err)
					}
					cp := crashCopy(t, dir)
					s.Close()
					dir = cp
					s = openStore(t, dir, opts)
				}
			}
			// Final stats agree with the model.
			for _, g := range s.Stats().Groups {
				if g.Cursor != m.cursor || g.Returned != int64(len(m.returned)) {
					t.Fatalf("stats cursor %d returned %d, model %d %d", g.Cursor, g.Returned, m.cursor, len(m.returned))
				}
				for _, c := range g.Consumers {
					mc := m.consumers[c.ID]
					if c.PullSeq != int64(len(mc.pulled)) || c.AckSeq != mc.acked {
						t.Fatalf("consumer %s: %d/%d, model %d/%d", c.ID, c.PullSeq, c.AckSeq, len(mc.pulled), mc.acked)
					}
				}
			}
		})
	}
}

func max64(a, b int64) int64 { return max(a, b) }
