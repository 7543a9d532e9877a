package metaserver

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// History: every HistoryInterval the server samples the cluster (the sum
// over realtime masters of the in and out rates their heartbeats report,
// the delay masters' pending messages, and the consumer groups' backlog
// and retry backlog, asked of every realtime master with CmdBrokerStats)
// and keeps the last hour in memory, for the console's charts (GET
// /history), with the consumer groups that hold dead letters as the last
// sample found them (the console's overview lists them without asking the
// brokers at each refresh). The backlog costs a request to every realtime
// master, so it is sampled only while someone asked for the history within
// the hour (zero before; the first ask samples at once). Each meta server keeps its own; a restarted one starts
// empty.

const historyWindow = time.Hour

type history struct {
	asked   atomic.Int64 // Unix ns of the last GET /history
	mu      sync.Mutex
	samples []api.HistorySample // oldest first, within historyWindow
	dead    []api.DeadGroup     // from the last sample that asked the masters
	deadAt  time.Time           // when; zero before the first
}

func (h *history) add(x api.HistorySample, dead []api.DeadGroup, asked bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if asked {
		h.dead, h.deadAt = dead, x.At
	}
	h.samples = append(h.samples, x)
	cut := 0
	for cut < len(h.samples) && x.At.Sub(h.samples[cut].At) > historyWindow {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
}

func (h *history) get() ([]api.HistorySample, []api.DeadGroup, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]api.HistorySample{}, h.samples...), append([]api.DeadGroup{}, h.dead...), h.deadAt
}

func (s *Server) historyInterval() time.Duration {
	if s.opts.HistoryInterval > 0 {
		return s.opts.HistoryInterval
	}
	return 10 * time.Second
}

// historyLoop samples the cluster every HistoryInterval until ctx ends.
func (s *Server) historyLoop(ctx context.Context) {
	t := time.NewTicker(s.historyInterval())
	defer t.Stop()
	for {
		s.hist.add(s.sample(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads the cluster's rates and pending from the view and, while
// the history is wanted, the backlog and the groups with dead letters from
// the realtime masters (asked reports whether it did).
func (s *Server) sample(ctx context.Context) (x api.HistorySample, dead []api.DeadGroup, asked bool) {
	x = api.HistorySample{At: time.Now().UTC()}
	v := s.view
	v.mu.RLock()
	for bk, e := range v.brokers {
		if bk.role != protocol.RoleMaster {
			continue
		}
		if e.rec.Kind == protocol.KindDelay {
			x.DelayPending += e.rec.Load.Pending
			continue
		}
		x.InPerSec += uint64(e.rec.Load.InPerSec)
		x.OutPerSec += uint64(e.rec.Load.OutPerSec)
	}
	v.mu.RUnlock()
	if time.Since(time.Unix(0, s.hist.asked.Load())) > historyWindow {
		return x, nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, s.historyInterval())
	defer cancel()
	cgs, err := s.consumerGroups(cctx, "")
	if err != nil {
		return x, nil, false
	}
	dead = []api.DeadGroup{}
	for _, g := range cgs {
		x.Backlog += g.Backlog + g.RetryBacklog
		if g.DeadLetters > 0 {
			dead = append(dead, api.DeadGroup{Subject: g.Subject, Group: g.Group, DeadLetters: g.DeadLetters})
		}
	}
	return x, dead, true
}

// getHistory answers the samples; a first ask (or one after the masters
// were last asked two intervals ago) samples at once, so the backlog and
// dead letters are there from the first answer.
func (s *Server) getHistory(r *http.Request) (any, error) {
	s.hist.asked.Store(time.Now().UnixNano())
	if _, _, at := s.hist.get(); time.Since(at) > 2*s.historyInterval() {
		s.hist.add(s.sample(r.Context()))
	}
	samples, dead, _ := s.hist.get()
	return api.History{IntervalSeconds: s.historyInterval().Seconds(), Samples: samples, DeadLetters: dead}, nil
}
