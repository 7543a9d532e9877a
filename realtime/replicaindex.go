package realtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// A slave copies its master's message-index runs (CmdSyncIndexRun) instead
// of indexing what it copies (store/indexcopy.go): indexCopyLoop asks for
// the run that starts where the copy's index ends whenever the copy holds
// records past it, and installs it once whole. When the master has no such
// run and will have none (its runs are cut elsewhere, it keeps no index,
// or it does not know the command), or a copied run does not check, the
// slave builds its own index from the log instead, from then on.
// Promotion turns the index to indexing the log past the last copied run
// (store.Replica.Promote).

// indexCopyEvery is how often indexCopyLoop looks for a new run.
const indexCopyEvery = 200 * time.Millisecond

// indexCopyLoop copies the master's index runs until the replica closes
// or the index stops copying (one per replica, beside replicaLoop).
func (y *replica) indexCopyLoop() {
	defer y.wg.Done()
	tick := time.NewTicker(indexCopyEvery)
	defer tick.Stop()
	var image []byte // a fetched run not yet installed (the copy lags it)
	for {
		select {
		case <-y.ctx.Done():
			return
		case <-tick.C:
		}
		end, copying, behind := y.store.Replica().CopiedIndexEnd()
		if !copying {
			return
		}
		if !behind {
			continue
		}
		if image == nil {
			var err error
			image, err = y.fetchIndexRun(end)
			if errors.Is(err, store.ErrIndexRunMismatch) {
				y.lg.Info("the master has no index run to copy: indexing the copy here", zap.Int64("from", end), zap.Error(err))
				y.store.Replica().BuildMessageIndex()
				return
			}
			if err != nil || image == nil {
				continue // retried at the next tick
			}
		}
		err := y.store.Replica().AddIndexRun(image)
		switch {
		case errors.Is(err, store.ErrIndexRunAhead):
			continue // kept until the copy has indexed its records
		case err != nil:
			y.lg.Warn("cannot add a copied index run: indexing the copy here", zap.Int64("from", end), zap.Error(err))
			y.store.Replica().BuildMessageIndex()
			return
		}
		image = nil
	}
}

// fetchIndexRun returns the master's run file that starts at from, or nil
// when there is none yet; ErrIndexRunMismatch when there will be none.
func (y *replica) fetchIndexRun(from int64) ([]byte, error) {
	master := y.master()
	if master == "" {
		return nil, errNoMaster
	}
	var image []byte
	for {
		ctx, cancel := context.WithTimeout(y.ctx, 10*time.Second)
		body, err := y.client.Call(ctx, master, protocol.CmdSyncIndexRun, protocol.AppendSyncIndexRunRequest(nil,
			&protocol.SyncIndexRunRequest{Group: y.opts.Group, Epoch: y.epoch.Load(), From: from, Pos: int64(len(image))}))
		cancel()
		switch st := protocol.StatusOf(err); {
		case st == protocol.StatusNotFound || st == protocol.StatusUnknownCommand:
			return nil, fmt.Errorf("%w: %w", store.ErrIndexRunMismatch, err)
		case err != nil:
			return nil, err
		}
		p, err := protocol.DecodeSyncIndexRunResponse(body)
		if err != nil {
			return nil, err
		}
		if p.Size == 0 {
			return nil, nil // not written yet
		}
		if image == nil {
			image = make([]byte, 0, p.Size)
		}
		if int64(cap(image)) != p.Size || len(p.Data) == 0 {
			return nil, fmt.Errorf("index run at %d: %d bytes of %d, then %d", from, len(image), p.Size, len(p.Data))
		}
		image = append(image, p.Data...)
		if int64(len(image)) == p.Size {
			return image, nil
		}
	}
}

// serveSyncIndexRun answers CmdSyncIndexRun from the master's message
// index (store.ReadIndexRun).
func (b *Broker) serveSyncIndexRun(r *netserver.Request) {
	t := b.cur()
	if t.sync == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is a slave"))
		return
	}
	q, err := protocol.DecodeSyncIndexRunRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if q.Group != b.opts.Group {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("a slave of broker group %q asked the master of %q", q.Group, b.opts.Group)))
		return
	}
	if epoch := b.epoch(); q.Epoch != epoch {
		r.ReplyError(protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf("index run asked at epoch %d, this master serves epoch %d", q.Epoch, epoch)))
		return
	}
	buf := make([]byte, 16, 16+protocol.MaxSyncIndexChunk)
	n, size, to, err := t.store.ReadIndexRun(q.From, q.Pos, buf[16:16+protocol.MaxSyncIndexChunk])
	switch {
	case errors.Is(err, store.ErrIndexRunMismatch), errors.Is(err, store.ErrNoIndex):
		r.ReplyError(protocol.Errorf(protocol.StatusNotFound, err.Error()))
		return
	case err != nil:
		r.ReplyError(protocol.Errorf(protocol.StatusStoreError, err.Error()))
		return
	}
	body := protocol.AppendSyncIndexRunResponse(buf[:0], &protocol.SyncIndexRunResponse{Size: size, To: to})
	r.Reply(protocol.StatusOK, body[:16+n])
}
