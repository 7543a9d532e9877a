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
// goroutine for the small requests most sends are. It never blocks: the
// request is detached (its body copied, to be answered from the store's
// commit goroutine), small requests are checked and queued with
// TryAppendAsync, big ones and a full append queue go to a goroutine.
func (b *Broker) serveSendInline(r *netserver.Request) {
	d := r.Detach()
	if len(d.Body) > inlineSendBytes {
		go b.sendRequest(d, true)
		return
	}
	b.sendRequest(d, false)
}

// serveSend is serveSendInline's blocking form, for callers off the loop.
func (b *Broker) serveSend(r *netserver.Request) { b.sendRequest(r, true) }

// sendRequest stores a batch of messages: each is checked (CRC, limits,
// subject), dropped as a duplicate when its (subject, id, attempts) was
// stored within the dedupe window, and the rest go to the store in one
// append; the reply carries one status per message, once they are durable.
// With blocking false it must not block: it tries the append and hands it
// to a goroutine when the store's queue is full.
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
	n := len(req.Messages)
	b.metrics.received.Add(float64(n))
	statuses := make([]protocol.Status, n)
	keys := make([]uint64, n)
	reserved := make([]bool, n)
	batch := make([][]byte, 0, n)
	index := make([]int, 0, n) // batch position → request position
	for i, raw := range req.Messages {
		v, err := protocol.ParseMessage(raw)
		if err == nil {
			err = b.limits.CheckView(&v)
		}
		if err != nil {
			statuses[i] = protocol.StatusOf(err)
			b.metrics.rejected.WithLabelValues(statuses[i].String()).Inc()
			if statuses[i] == protocol.StatusInternal {
				statuses[i] = protocol.StatusInvalid
			}
			b.lg.Debug("message rejected", zap.String("conn", r.Conn.String()), zap.Error(err))
			continue
		}
		if b.dedupe.enabled() {
			keys[i] = b.dedupe.key(v.Subject, v.ID, v.Attempts)
			if !b.dedupe.reserve(keys[i]) {
				statuses[i] = protocol.StatusDuplicate
				b.metrics.duplicates.Inc()
				continue
			}
			reserved[i] = true
		}
		batch = append(batch, raw)
		index = append(index, i)
	}
	if len(batch) == 0 {
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		return
	}
	start := time.Now()
	done := func(results []store.Result) {
		stored := 0
		for j, res := range results {
			i := index[j]
			if res.Err == nil {
				stored++
				continue
			}
			if reserved[i] {
				b.dedupe.release(keys[i])
			}
			statuses[i] = appendStatus(res.Err)
			b.metrics.rejected.WithLabelValues(statuses[i].String()).Inc()
		}
		b.metrics.stored.Add(float64(stored))
		b.metrics.appendSecs.Observe(time.Since(start).Seconds())
		b.replyStored(r, statuses, results)
	}
	failed := func(err error) {
		for j := range batch {
			if i := index[j]; reserved[i] {
				b.dedupe.release(keys[i])
			}
		}
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, fmt.Sprintf("store: %v", err)))
	}
	if !blocking {
		err = b.store.TryAppendAsync(batch, done)
		if errors.Is(err, store.ErrWouldBlock) {
			go func() {
				if err := b.store.AppendAsync(batch, done); err != nil {
					failed(err)
				}
			}()
			return
		}
	} else {
		err = b.store.AppendAsync(batch, done)
	}
	if err != nil {
		failed(err)
	}
}

// appendStatus maps a store append error to the message's status.
func appendStatus(err error) protocol.Status {
	if st := protocol.StatusOf(err); st != protocol.StatusInternal {
		return st
	}
	return protocol.StatusStoreError
}
