package realtime

import (
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// serveSend stores a batch of messages: each is checked (CRC, limits,
// subject), dropped as a duplicate when its (subject, id, attempts) was
// stored within the dedupe window, and the rest go to the store in one
// append; the reply carries one status per message, once they are durable.
func (b *Broker) serveSend(r *netserver.Request) {
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
	err = b.store.AppendAsync(batch, func(results []store.Result) {
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
	})
	if err != nil {
		for j := range batch {
			if i := index[j]; reserved[i] {
				b.dedupe.release(keys[i])
			}
		}
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, fmt.Sprintf("store: %v", err)))
	}
}

// appendStatus maps a store append error to the message's status.
func appendStatus(err error) protocol.Status {
	if st := protocol.StatusOf(err); st != protocol.StatusInternal {
		return st
	}
	return protocol.StatusStoreError
}
