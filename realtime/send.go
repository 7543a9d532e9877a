package realtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// inlineSendBytes bounds the send requests served on the event loop: a
// bigger one (up to the frame limit) costs enough checking (CRC, limits,
// dedupe) to delay the loop's other connections, so it goes to a goroutine.
const inlineSendBytes = 64 << 10

// serveSendInline is the send handler; it runs on the event loop (the mux
// registers it with HandleInline), which saves the hand-off to a serve
// goroutine for the small requests most sends are. It never blocks. When
// the store can append at once (store.TryAppendNow: FlushAsync, nothing
// else appending) the reply is made on the loop and written at the end of
// the read, so a lone send crosses no goroutine at all. Otherwise the
// request is detached (its body copied, to be answered from the store's
// commit goroutine) and queued with TryAppendAsync; big requests and a full
// append queue go to a goroutine.
func (b *Broker) serveSendInline(r *netserver.Request) {
	if len(r.Body) > inlineSendBytes {
		go b.sendRequest(r.Detach(), true)
		return
	}
	b.sendRequest(r, false)
}

// sendRequest stores a batch of messages: each is checked (CRC, limits,
// subject), dropped as a duplicate when its (subject, id, attempts) was
// stored within the dedupe window, and the rest go to the store in one
// append; the reply carries one status per message, once they are durable.
// With blocking false it runs on the event loop and must not block.
func (b *Broker) sendRequest(r *netserver.Request, blocking bool) {
	if err := b.writable(); err != nil {
		r.ReplyError(err)
		return
	}
	req, err := protocol.DecodeSendRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := b.checkEpoch(req.Epoch); err != nil {
		r.ReplyError(err)
		return
	}
	n := len(req.Messages)
	b.metrics.received.Add(float64(n))
	s := &sendCall{b: b}
	if n == 1 { // most sends of a producer waiting for each: one allocation
		s.statuses, s.keys, s.reserved = s.one.status[:], s.one.key[:], s.one.reserved[:]
		s.batch, s.index = s.one.batch[:0], s.one.index[:0]
	} else {
		s.statuses, s.keys, s.reserved = make([]protocol.Status, n), make([]uint64, n), make([]bool, n)
		s.batch, s.index = make([][]byte, 0, n), make([]int, 0, n)
	}
	for i, raw := range req.Messages {
		v, err := protocol.ParseMessage(raw)
		if err == nil {
			err = b.limits.CheckView(&v)
		}
		if err != nil {
			s.statuses[i] = protocol.StatusOf(err)
			b.metrics.rejected.WithLabelValues(s.statuses[i].String()).Inc()
			if s.statuses[i] == protocol.StatusInternal {
				s.statuses[i] = protocol.StatusInvalid
			}
			b.lg.Debug("message rejected", zap.String("conn", r.Conn.String()), zap.Error(err))
			continue
		}
		if b.dedupe.enabled() {
			s.keys[i] = b.dedupe.key(v.Subject, v.ID, v.Attempts)
			if !b.dedupe.reserve(s.keys[i]) {
				s.statuses[i] = b.duplicateStatus(s.keys[i])
				b.metrics.duplicates.Inc()
				continue
			}
			s.reserved[i] = true
		}
		s.batch = append(s.batch, raw)
		s.index = append(s.index, i)
	}
	if len(s.batch) == 0 {
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, s.statuses))
		return
	}
	s.start = time.Now()
	if !blocking {
		// A reply made now goes out with the loop's write at the end of the
		// read, unless it must wait for the slave.
		if !b.waitsForSlave() {
			if results, ok := b.store.TryAppendNow(s.batch); ok {
				s.r = r
				s.done(results)
				return
			}
		}
		// Answer later: keep a copy of the body and point the batch into it.
		r = r.Detach()
		req, _ = protocol.DecodeSendRequest(r.Body)
		for j, i := range s.index {
			s.batch[j] = req.Messages[i]
		}
	}
	s.r = r
	if !blocking {
		err = b.store.TryAppendAsync(s.batch, s.done)
		if errors.Is(err, store.ErrWouldBlock) {
			go func() {
				if err := b.store.AppendAsync(s.batch, s.done); err != nil {
					s.failed(err)
				}
			}()
			return
		}
	} else {
		err = b.store.AppendAsync(s.batch, s.done)
	}
	if err != nil {
		s.failed(err)
	}
}

// sendCall is one send request between its checks and its reply.
type sendCall struct {
	b        *Broker
	r        *netserver.Request
	statuses []protocol.Status
	keys     []uint64
	reserved []bool
	batch    [][]byte // the messages to store
	index    []int    // batch position → request position
	start    time.Time
	// one backs the slices above for a request of one message.
	one struct {
		status   [1]protocol.Status
		key      [1]uint64
		reserved [1]bool
		batch    [1][]byte
		index    [1]int
	}
}

// done completes the call with the store's results.
func (s *sendCall) done(results []store.Result) {
	b := s.b
	stored := 0
	for j, res := range results {
		i := s.index[j]
		if res.Err == nil {
			stored++
			continue
		}
		if s.reserved[i] {
			b.dedupe.release(s.keys[i])
		}
		s.statuses[i] = appendStatus(res.Err)
		b.metrics.rejected.WithLabelValues(s.statuses[i].String()).Inc()
	}
	b.metrics.stored.Add(float64(stored))
	b.metrics.appendSecs.Observe(time.Since(s.start).Seconds())
	b.replyStored(s, results)
}

// failed answers a call the store did not take.
func (s *sendCall) failed(err error) {
	for j := range s.batch {
		if i := s.index[j]; s.reserved[i] {
			s.b.dedupe.release(s.keys[i])
		}
	}
	s.r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, fmt.Sprintf("store: %v", err)))
}

// waitsForSlave reports whether send replies wait for the slave's copy.
func (b *Broker) waitsForSlave() bool { return b.sync != nil && b.opts.WaitSlave }

// appendStatus maps a store append error to the message's status.
func appendStatus(err error) protocol.Status {
	if st := protocol.StatusOf(err); st != protocol.StatusInternal {
		return st
	}
	return protocol.StatusStoreError
}
