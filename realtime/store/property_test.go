package store

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// model is the simple in-memory picture of one consumer group of one
// subject that the store must match.
type model struct {
	msgs      *[]modelMsg // shared by every group of the subject
	mode      protocol.TagMode
	tags      []string
	cursor    int64
	returned  []int64
	consumers map[string]*modelConsumer
}

type modelMsg struct {
	id   string
	tags []string
}

type modelConsumer struct {
	pulled []int64 // consume seq by pull seq; -1 void
	acked  int64
}

type got struct {
	pullSeq, seq int64
	id           string
}

func (m *model) matches(seq int64) bool {
	msg := (*m.msgs)[seq]
	has := func(t string) bool {
		for _, x := range msg.tags {
			if x == t {
				return true
			}
		}
		return false
	}
	switch m.mode {
	case protocol.TagAny:
		for _, t := range m.tags {
			if has(t) {
				return true
			}
		}
		return false
	case protocol.TagAll:
		for _, t := range m.tags {
			if !has(t) {
				return false
			}
		}
		return true
	}
	return true
}

func (m *model) consumer(id string) *modelConsumer {
	c := m.consumers[id]
	if c == nil {
		c = &modelConsumer{acked: -1}
		m.consumers[id] = c
	}
	return c
}

func (m *model) id(seq int64) string { return (*m.msgs)[seq].id }

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
				out = append(out, got{known + 1 + i, v, m.id(v)})
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
		if v := m.returned[0]; m.matches(v) {
			seqs = append(seqs, v)
		}
		m.returned = m.returned[1:]
	}
	for len(seqs) < max && m.cursor < int64(len(*m.msgs)) {
		if m.matches(m.cursor) {
			seqs = append(seqs, m.cursor)
		}
		m.cursor++
	}
	for _, v := range seqs {
		out = append(out, got{int64(len(c.pulled)), v, m.id(v)})
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
			gap = append(gap, got{p, v, m.id(v)})
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

// broadcastModel is one broadcast subscriber: pull seq == consume seq.
type broadcastModel struct {
	msgs          *[]modelMsg
	cursor, acked int64
}

func (b *broadcastModel) pull(max int, known int64) (out []got, redelivered bool) {
	known = maxI(known, b.acked)
	if known+1 < b.cursor {
		for seq := known + 1; seq < b.cursor && len(out) < max; seq++ {
			out = append(out, got{seq, seq, (*b.msgs)[seq].id})
		}
		return out, true
	}
	for len(out) < max && b.cursor < int64(len(*b.msgs)) {
		out = append(out, got{b.cursor, b.cursor, (*b.msgs)[b.cursor].id})
		b.cursor++
	}
	return out, false
}

func (b *broadcastModel) ack(last int64) {
	last = minI(last, b.cursor-1)
	if last > b.acked {
		b.acked = last
	}
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

// TestPropertyAgainstModel drives random appends (with random tags), pulls
// (holding or dropping what was pulled) by three groups with different tag
// filters and a broadcast subscriber, acks (contiguous and over gaps),
// consumer deaths, clean restarts and crashes after a flush against the
// store and the model, and compares every answer.
func TestPropertyAgainstModel(t *testing.T) {
	seeds := 4
	steps := 800
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
			opts.MaxScan = 1 << 20
			s := openStore(t, dir, opts)
			defer func() { s.Close() }()
			var msgs []modelMsg
			groups := map[string]*model{
				"g": {msgs: &msgs},
				"t": {msgs: &msgs, mode: protocol.TagAny, tags: []string{"red", "green"}},
				"u": {msgs: &msgs, mode: protocol.TagAll, tags: []string{"red", "blue"}},
			}
			names := []string{"g", "t", "u"}
			for _, name := range names {
				m := groups[name]
				m.consumers = map[string]*modelConsumer{}
				m.consumer("c0")
				pull(t, s, PullRequest{Subject: "p", Group: name, Consumer: "c0", TagMode: m.mode, Tags: m.tags})
			}
			bc := &broadcastModel{msgs: &msgs, acked: -1}
			pull(t, s, PullRequest{Subject: "p", Consumer: "b", Broadcast: true})
			consumers := []string{"c0", "c1", "c2", "c3"}
			held := map[string]int64{"b": -1} // highest pull seq each (group, consumer) holds
			allTags := []string{"red", "blue", "green"}
			n := 0
			for step := 0; step < steps; step++ {
				gname := names[rng.Intn(len(names))]
				m := groups[gname]
				id := consumers[rng.Intn(len(consumers))]
				hk := gname + "/" + id
				if _, ok := held[hk]; !ok {
					held[hk] = -1
				}
				switch op := rng.Intn(100); {
				case op < 25:
					k := 1 + rng.Intn(20)
					var batch [][]byte
					for i := 0; i < k; i++ {
						mid := fmt.Sprint("m", n)
						n++
						var tags []string
						for _, tg := range allTags {
							if rng.Intn(2) == 0 {
								tags = append(tags, tg)
							}
						}
						batch = append(batch, encode(t, "p", mid, nil, tags...))
						msgs = append(msgs, modelMsg{id: mid, tags: tags})
					}
					appendAll(t, s, batch...)
				case op < 55:
					max := 1 + rng.Intn(15)
					known := held[hk]
					if rng.Intn(4) == 0 {
						known = -1 // the consumer lost what it held
					}
					want, wantRe := m.pull(id, max, known)
					r, err := s.Pull(PullRequest{Subject: "p", Group: gname, Consumer: id, Max: max, KnownPullSeq: known, TagMode: m.mode, Tags: m.tags})
					if err != nil {
						t.Fatal(err)
					}
					if g := toGot(t, r.Messages); fmt.Sprint(g) != fmt.Sprint(want) || (len(want) > 0 && r.Redelivered != wantRe) {
						t.Fatalf("step %d pull %s max %d known %d:\n got %v %v\nwant %v %v", step, hk, max, known, g, r.Redelivered, want, wantRe)
					}
					if len(r.Messages) > 0 {
						held[hk] = max64(held[hk], r.Messages[len(r.Messages)-1].PullSeq)
					}
				case op < 75:
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
					r, err := s.Ack(AckRequest{Subject: "p", Group: gname, Consumer: id, First: first, Last: last})
					if err != nil {
						t.Fatal(err)
					}
					if g := toGot(t, r.Gap); fmt.Sprint(g) != fmt.Sprint(want) {
						t.Fatalf("step %d ack %s %d..%d gap:\n got %v\nwant %v", step, hk, first, last, g, want)
					}
				case op < 82:
					if _, ok := m.consumers[id]; !ok {
						continue
					}
					want := m.ret(id)
					got, err := s.ReturnUnacked("p", gname, id)
					if errors.Is(err, ErrUnknownConsumer) && len(m.consumers[id].pulled) == 0 {
						err = nil // never pulled anything: nothing was persisted
					}
					if err != nil || got != want {
						t.Fatalf("step %d return %s: %d %v, want %d", step, hk, got, err, want)
					}
					held[hk] = m.consumers[id].acked
				case op < 90:
					max := 1 + rng.Intn(10)
					known := held["b"]
					if rng.Intn(4) == 0 {
						known = -1
					}
					want, wantRe := bc.pull(max, known)
					r, err := s.Pull(PullRequest{Subject: "p", Consumer: "b", Broadcast: true, Max: max, KnownPullSeq: known})
					if err != nil {
						t.Fatal(err)
					}
					if g := toGot(t, r.Messages); fmt.Sprint(g) != fmt.Sprint(want) || (len(want) > 0 && r.Redelivered != wantRe) {
						t.Fatalf("step %d broadcast pull max %d known %d:\n got %v %v\nwant %v %v", step, max, known, g, r.Redelivered, want, wantRe)
					}
					if len(r.Messages) > 0 {
						held["b"] = max64(held["b"], r.Messages[len(r.Messages)-1].PullSeq)
						if rng.Intn(2) == 0 {
							last := r.Messages[len(r.Messages)-1].PullSeq
							bc.ack(last)
							if _, err := s.Ack(AckRequest{Subject: "p", Consumer: "b", Broadcast: true, First: r.Messages[0].PullSeq, Last: last}); err != nil {
								t.Fatal(err)
							}
						}
					}
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
			// Final stats agree with the models.
			for _, g := range s.Stats().Groups {
				if g.Broadcast {
					if g.Cursor != bc.cursor || g.Consumers[0].AckSeq != bc.acked {
						t.Fatalf("broadcast cursor %d acked %d, model %d %d", g.Cursor, g.Consumers[0].AckSeq, bc.cursor, bc.acked)
					}
					continue
				}
				m := groups[g.Group]
				if g.Cursor != m.cursor || g.Returned != int64(len(m.returned)) {
					t.Fatalf("group %s cursor %d returned %d, model %d %d", g.Group, g.Cursor, g.Returned, m.cursor, len(m.returned))
				}
				for _, c := range g.Consumers {
					mc := m.consumers[c.ID]
					if c.PullSeq != int64(len(mc.pulled)) || c.AckSeq != mc.acked {
						t.Fatalf("consumer %s/%s: %d/%d, model %d/%d", g.Group, c.ID, c.PullSeq, c.AckSeq, len(mc.pulled), mc.acked)
					}
				}
			}
		})
	}
}

func max64(a, b int64) int64 { return max(a, b) }
