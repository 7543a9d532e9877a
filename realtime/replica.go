package realtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// replica is the slave's side of replication (one per slave term, or per
// copy after the role loop stopped one for a campaign): replicaLoop asks
// the master for its logs past this store's committed ends and hands the
// chunks to the store, which writes them at the same offsets and replays
// them. What it hears of its master goes to the role loop through the
// broker's copyWatch.
type replica struct {
	b      *Broker
	t      *term
	store  *store.Store
	opts   *Options
	lg     *zap.Logger
	client *transport.Client
	epoch  atomic.Uint64 // the master's epoch, learnt with CmdSyncEpoch
	// syncers are copySyncLoops' descriptors, made at the first follow
	// (replicaLoop's goroutine) and closed with the replica.
	syncers [copySyncLoops]*store.ReplicaSyncer

	lagBytes   atomic.Int64
	caughtUpAt atomic.Int64 // unix nanos: the copy last held all the master had committed
	connected  atomic.Bool
	following  atomic.Pointer[string] // the master synced from last

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

func newReplica(b *Broker, t *term) (*replica, error) {
	to := transport.Options{RequestTimeout: b.opts.SyncWait + 10*time.Second}
	b.kit.Client(&to) // a slave proves its group to its master
	c, err := transport.New(to, b.lg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	y := &replica{b: b, t: t, store: t.store, opts: &b.opts, lg: b.lg.Named("replica"),
		client: c, ctx: ctx, cancel: cancel}
	y.caughtUpAt.Store(time.Now().UnixNano())
	return y, nil
}

func (y *replica) start() {
	y.wg.Add(2)
	go y.replicaLoop()
	go y.indexCopyLoop()
}

// close stops replicaLoop and waits for it: no request leaves after it.
func (y *replica) close() {
	y.closeOnce.Do(func() {
		y.cancel()
		y.wg.Wait()
		y.client.Close()
		for _, sy := range y.syncers {
			if sy != nil {
				sy.Close()
			}
		}
	})
}

// replicaLoop syncs until close (follow) and backs off 50 ms → 1 s after a
// failure.
func (y *replica) replicaLoop() {
	defer y.wg.Done()
	backoff := time.Duration(0)
	var lastErr string
	for y.ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-y.ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		err := y.follow()
		if y.ctx.Err() != nil {
			return
		}
		var cut *truncation
		if errors.As(err, &cut) && y.b.managed() {
			y.lg.Warn("the copy holds records the master does not; handing over to be cut back", zap.Error(err))
			y.b.startTruncate(y.t, *cut)
			return
		}
		y.b.replErrors.Add(1)
		y.b.copyWatch.Failed(err)
		y.connected.Store(false)
		if errors.Is(err, errNoMaster) {
			backoff = failover.NoMasterRetry // the meta servers name one within a heartbeat
			continue
		}
		if err.Error() != lastErr {
			lastErr = err.Error()
			level := zap.WarnLevel
			if errors.Is(err, store.ErrReplicaGap) || errors.Is(err, store.ErrReplicaMismatch) || errors.Is(err, protocol.ErrInvalid) || errors.As(err, &cut) {
				level = zap.ErrorLevel // needs an operator: a fresh copy or matching options
			}
			y.lg.Log(level, "sync failed; retrying", zap.Error(err))
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
	}
}

// errNoMaster: neither Options.Master nor the meta servers name a master.
var errNoMaster = errors.New("no master known yet: the meta servers name none")

// master returns the address to sync from: Options.Master, or the group's
// live master as the meta servers last named it.
func (y *replica) master() string { return y.b.following() }

type fetched struct {
	body []byte
	err  error
}

// flight is a fetch in flight: its answer comes on ch, read into into
// when it fits; ahead: a pipelined fetch (protocol.CmdSyncLogAhead).
type flight struct {
	ch    chan fetched
	into  []byte
	ahead bool
}

// fetchDepth is how many fetches a slave keeps in flight: one parked at
// the master while the answer before it travels and is written, so a
// record is sent as soon as the master writes it (NOTES.md, "Replication:
// pipelined fetches"). Four in flight were no better in two alternating
// pairs of timed runs (the master answers a stream's fetches one after the
// other, and more, smaller answers cost CPU).
const fetchDepth = 2

// maxSpareBytes bounds the capacity of the received sync bodies a slave
// keeps to read later ones into, and minSpareBody is the smallest it keeps
// (see bodyBuffers). Four bodies, the bound before, were too few: the
// store held them all (a tentative tail's chunks wait for the master's
// committed end), so most fetches allocated a body again (NOTES.md,
// "Replication: where the pair's CPU goes").
const (
	maxSpareBytes = 16 << 20
	minSpareBody  = 64 << 10
)

// bodyBuffers are sync response bodies the slave received, to be read
// into again (transport.Client.GoInto) instead of allocating and zeroing
// up to 2 MiB per fetch. The store keeps a tentative tail's chunks (their
// bodies) until it indexes them, so a body is reused only once the store
// no longer holds it (store.Replica.Holds). Small bodies are not kept (an
// idle answer's would be handed out and then be too small for the next
// answer). Only follow's goroutine uses it; after a transport error follow
// drops them all (a reader may still write into the one in flight).
type bodyBuffers struct {
	spare [][]byte
	bytes int // the spares' capacity
}

// take returns the largest kept body the store no longer holds, or nil.
func (bb *bodyBuffers) take(st *store.Store) []byte {
	best := -1
	for i, b := range bb.spare {
		if (best < 0 || cap(b) > cap(bb.spare[best])) && !st.Replica().Holds(b) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := bb.spare[best]
	last := len(bb.spare) - 1
	bb.spare[best] = bb.spare[last]
	bb.spare[last] = nil
	bb.spare = bb.spare[:last]
	bb.bytes -= cap(b)
	return b[:0]
}

// put keeps a body that is no longer read (the store may still hold it),
// unless it is small or the spares would pass maxSpareBytes.
func (bb *bodyBuffers) put(b []byte) {
	if cap(b) >= minSpareBody && bb.bytes+cap(b) <= maxSpareBytes {
		bb.spare = append(bb.spare, b)
		bb.bytes += cap(b)
	}
}

// follow copies the master's logs until an error. It keeps fetchDepth
// fetches in flight while it writes the chunk before: a CmdSyncLog, then
// pipelined ones (CmdSyncLogAhead, one fetch in flight against a master
// that refuses them) that the master answers in turn, each from where the
// one before ended; it writes (to the page cache) and replays the
// previous chunk, and waits for the oldest fetch. copySyncer's loops
// fdatasync what was written meanwhile and acknowledge the durable end at
// once with a one-way request (the fetches may be long-polling), so the
// copy receives while it syncs. Every request also
// carries the durable end, the acknowledgement, and the master's cut
// generation last heard. A cut answer (the master cut back a tentative
// tail this copy may hold) cuts the copy's tail back, or hands the copy
// over to be truncated when the cut lies below what it has indexed.
func (y *replica) follow() error {
	master := y.master()
	if master == "" {
		return errNoMaster
	}
	if prev := y.following.Load(); prev == nil || *prev != master {
		y.following.Store(&master)
		y.lg.Info("following master", zap.String("addr", master))
	}
	epoch, err := y.agreeEpoch(master)
	if err != nil {
		return err
	}
	msgSeg, actSeg := y.store.SegmentSizes()
	msgPos, _ := y.store.Replica().Ends()
	_, actPos := y.store.CommittedEnds()
	var gen uint64   // the master's cut generation, as last heard
	var stamp uint64 // the lease stamp of the master's latest answer (pkg/failover)
	id := y.b.advertised()
	base := protocol.SyncRequest{Epoch: epoch, Group: y.opts.Group, MessageSegmentSize: msgSeg, ActionSegmentSize: actSeg,
		WaitMillis: uint32(y.opts.syncWait() / time.Millisecond), SlaveID: id}
	request := func(maxBytes uint32) []byte {
		_, durable := y.store.Replica().Ends()
		q := base
		q.MessageOffset, q.ActionOffset, q.MessageDurable = msgPos, actPos, min(durable, msgPos)
		q.MaxBytes, q.Generation, q.LeaseStamp = maxBytes, gen, stamp
		return protocol.AppendSyncRequest(nil, &q)
	}
	if y.syncers[0] == nil {
		for i := range y.syncers {
			y.syncers[i] = y.store.Replica().NewSyncer()
		}
	}
	// The acknowledgements name the action log's end as written (a fetch
	// names what was received).
	acks := newCopySyncer(y, master, func() protocol.SyncRequest {
		q := base
		q.MessageOffset, q.ActionOffset = msgPos, actPos
		return q
	}(), y.syncers)
	acks.start()
	defer acks.close()
	// What an earlier connection wrote and did not sync is synced now.
	acks.wake()
	var pending *protocol.SyncResponse // received, not yet written
	var pendingBody []byte             // pending's body
	var bodies bodyBuffers
	var flights []flight // in flight, oldest first
	depth := fetchDepth
	for {
		for len(flights) < depth {
			// The first is a CmdSyncLog; the ones sent while it is
			// unanswered are pipelined (CmdSyncLogAhead): the master
			// answers each after the one before, from where it ended, and
			// it may hold each for SyncWait after that one.
			g := flight{ch: make(chan fetched, 1), into: bodies.take(y.store), ahead: len(flights) > 0}
			cmd, timeout := protocol.CmdSyncLog, y.opts.SyncWait+10*time.Second
			if g.ahead {
				cmd, timeout = protocol.CmdSyncLogAhead, timeout+y.opts.SyncWait
			}
			y.b.copyWatch.Asking()
			if err := y.client.GoInto(master, cmd, request(uint32(y.opts.SyncMaxBytes)), g.into, timeout,
				func(body []byte, err error) {
					if err == nil {
						y.b.copyWatch.Heard() // when it arrives, however busy the slave is
					}
					g.ch <- fetched{body, err}
				}); err != nil {
				return err
			}
			flights = append(flights, g)
		}
		if pending != nil {
			if err := y.writeMessages(pending); err != nil {
				return err
			}
			acks.wake()
			if len(pending.Action.Data) > 0 {
				// Actions name messages the master had committed: those are
				// durable and indexed here first.
				if err := y.syncMessages(); err != nil {
					return err
				}
				if err := y.applyActions(pending); err != nil {
					return err
				}
			} else {
				y.noteLag(pending.Message)
			}
			written, _ := y.store.Replica().Ends()
			_, acted := y.store.CommittedEnds()
			acks.set(func(q *protocol.SyncRequest) {
				q.MessageOffset, q.ActionOffset, q.Generation, q.LeaseStamp = written, acted, gen, stamp
			})
			pending = nil
			bodies.put(pendingBody)
		}
		var f fetched
		g := flights[0]
		select {
		case f = <-g.ch:
		case err := <-acks.failed:
			return err
		case <-y.ctx.Done():
			return y.ctx.Err()
		}
		flights = append(flights[:0], flights[1:]...)
		if f.err != nil {
			if g.ahead && protocol.StatusOf(f.err) == protocol.StatusUnknownCommand {
				// An older master: one fetch in flight (the pipelined ones
				// it refused read nothing).
				if depth > 1 {
					y.lg.Info("the master does not answer pipelined sync fetches: one fetch in flight", zap.String("master", master))
				}
				depth = 1
				continue
			}
			return f.err
		}
		if len(f.body) > cap(g.into) {
			bodies.put(g.into) // not read into: the body did not fit
		}
		p, err := protocol.DecodeSyncResponse(f.body)
		if err != nil {
			return err
		}
		stamp = p.LeaseStamp
		if p.Epoch != epoch {
			return fmt.Errorf("%w: the master answered from epoch %d, agreed on %d", errEpochChanged, p.Epoch, epoch)
		}
		y.connected.Store(true)
		gen = p.Generation
		if p.Cut >= 0 {
			// Under the acknowledgements' lock: none names the new
			// generation with a durable end from before the cut.
			acks.mu.Lock()
			err := y.cutTail(p.Cut)
			msgPos, _ = y.store.Replica().Ends()
			acks.q.MessageOffset, acks.q.Generation, acks.q.LeaseStamp = msgPos, gen, stamp
			acks.acked = -1
			acks.mu.Unlock()
			if err != nil {
				return err
			}
			bodies.put(f.body)
			// The fetches in flight were sent before the cut was heard:
			// the master answers them with it too. Their answers are
			// dropped and the next fetch (a CmdSyncLog) asks from the cut.
			for _, g := range flights {
				select {
				case f := <-g.ch:
					if f.err != nil && protocol.StatusOf(f.err) != protocol.StatusUnknownCommand {
						return f.err
					}
				case err := <-acks.failed:
					return err
				case <-y.ctx.Done():
					return y.ctx.Err()
				}
			}
			flights = flights[:0]
			continue
		}
		if m := &p.Message; m.Offset == m.Start && m.Offset > msgPos && int64(len(m.Data)) > m.End-m.Offset {
			// A restart at the master's first kept offset takes what is
			// durable there only (see store.ReplicateMessages).
			m.Data = m.Data[:max(m.End-m.Offset, 0)]
		}
		if len(p.Message.Data) == 0 && len(p.Action.Data) == 0 {
			// No records, but the committed end may have passed the
			// tentative tail: index it.
			if err := y.writeMessages(&p); err != nil {
				return err
			}
			if err := y.store.Replica().IndexMessages(); err != nil {
				return err
			}
			acks.set(func(q *protocol.SyncRequest) { q.Generation, q.LeaseStamp = gen, stamp })
			y.noteLag(p.Message)
			bodies.put(f.body)
			continue
		}
		if len(p.Message.Data) > 0 {
			msgPos = p.Message.Offset + int64(len(p.Message.Data))
		}
		if len(p.Action.Data) > 0 {
			actPos = p.Action.Offset + int64(len(p.Action.Data))
		}
		pending, pendingBody = &p, f.body
	}
}

// cutTail cuts the copy's message log back to off after the master cut
// its own (the copy may hold a tentative tail the master replaced). A cut
// below what the copy has indexed (it reopened with the tail indexed) is
// a truncation, as after a failover.
func (y *replica) cutTail(off int64) error {
	err := y.store.Replica().CutTail(off)
	if errors.Is(err, store.ErrReplicaMismatch) {
		_, act := y.store.CommittedEnds()
		return &truncation{Message: off, Action: act, History: y.b.epochHistory()}
	}
	return err
}

// errEpochChanged: the master's epoch moved; the slave agrees on it again.
var errEpochChanged = errors.New("the master's epoch changed")

// agreeEpoch runs the CmdSyncEpoch exchange with master before copying:
// a copy holding records the master does not is cut back first (a
// *truncation error), and the master's epoch history becomes the slave's
// (on disk before anything of its epoch is copied). It returns the epoch
// the copy follows.
func (y *replica) agreeEpoch(master string) (uint64, error) {
	mine := y.b.epochHistory()
	ctx, cancel := context.WithTimeout(y.ctx, 5*time.Second)
	defer cancel()
	y.b.copyWatch.Asking()
	body, err := y.client.Call(ctx, master, protocol.CmdSyncEpoch,
		protocol.AppendSyncEpochRequest(nil, &protocol.SyncEpochRequest{Group: y.opts.Group, History: mine}))
	if err != nil {
		return 0, err
	}
	p, err := protocol.DecodeSyncEpochResponse(body)
	if err != nil {
		return 0, err
	}
	y.b.copyWatch.Heard()
	msgEnd, actEnd := y.store.CommittedEnds()
	if msgEnd > p.TruncateMessage || actEnd > p.TruncateAction {
		return 0, &truncation{Message: p.TruncateMessage, Action: p.TruncateAction, History: p.History}
	}
	if err := y.b.setHistory(p.History); err != nil {
		return 0, err
	}
	e := failover.LastEpoch(p.History)
	if y.epoch.Swap(e) != e {
		y.lg.Info("following epoch", zap.Uint64("epoch", e), zap.String("master", master))
	}
	return e, nil
}

// writeMessages writes a received response's message-log chunk (not yet
// durable: copySyncer syncs it); syncMessages makes what was written
// durable and indexes it; applyActions writes and replays a response's
// action-log chunk.
func (y *replica) writeMessages(p *protocol.SyncResponse) error {
	m := store.LogChunk{Start: p.Message.Start, End: p.Message.End, Offset: p.Message.Offset, Data: p.Message.Data}
	return y.store.Replica().WriteMessages(m)
}

func (y *replica) syncMessages() error {
	if err := y.store.Replica().SyncMessages(); err != nil {
		return err
	}
	return y.store.Replica().IndexMessages()
}

func (y *replica) applyActions(p *protocol.SyncResponse) error {
	a := store.LogChunk{Start: p.Action.Start, End: p.Action.End, Offset: p.Action.Offset, Data: p.Action.Data}
	if err := y.store.Replica().ReplicateActions(a); err != nil {
		return err
	}
	y.noteLag(p.Message)
	return nil
}

// noteLag records how far the copy is behind the master's committed end
// as of a response.
func (y *replica) noteLag(c protocol.SyncChunk) {
	end, _ := y.store.Replica().Ends()
	y.lagBytes.Store(max(c.End-end, 0))
	if end >= c.End || (len(c.Data) == 0 && c.Offset >= c.End) {
		y.caughtUpAt.Store(time.Now().UnixNano())
	}
}

// lag returns how far the copy is behind: committed bytes it lacks as of
// the last answer, and the time since it last held all the master had
// committed.
func (y *replica) lag() (int64, time.Duration) {
	return y.lagBytes.Load(), time.Since(time.Unix(0, y.caughtUpAt.Load()))
}
