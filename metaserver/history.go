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
// /history). The backlog costs a request to every realtime master, so it
// is sampled only while someone asked for the history within the hour
// (zero before). Each meta server keeps its own; a restarted one starts
// empty.

const historyWindow = time.Hour

type history struct {
	asked   atomic.Int64 // Unix ns of the last GET /history
	mu      sync.Mutex
	samples []api.HistorySample // oldest first, within historyWindow
}

func (h *history) add(x api.HistorySample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, x)
	cut := 0
	for cut < len(h.samples) && x.At.Sub(h.samples[cut].At) > historyWindow {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
}

func (h *history) get() []api.HistorySample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]api.HistorySample{}, h.samples...)
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

// sample reads the cluster's rates and pending from the view and the
// backlog from the realtime masters.
func (s *Server) sample(ctx context.Context) api.HistorySample {
	x := api.HistorySample{At: time.Now().UTC()}
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
		return x
	}
	cctx, cancel := context.WithTimeout(ctx, s.historyInterval())
	defer cancel()
	if cgs, err := s.consumerGroups(cctx, ""); err == nil {
		for _, g := range cgs {
			x.Backlog += g.Backlog + g.RetryBacklog
		}
	}
	return x
}

func (s *Server) getHistory(*http.Request) (any, error) {
	s.hist.asked.Store(time.Now().UnixNano())
	return api.History{IntervalSeconds: s.historyInterval().Seconds(), Samples: s.hist.get()}, nil
}
