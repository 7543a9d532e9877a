package realtime

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/ackwait"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// Roles of a broker in its group (Options.Role).
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// maxSyncWait caps how long a master holds a sync request, whatever the
// slave asks for.
const maxSyncWait = 10 * time.Second

// lagSampleEvery is how often the master samples its committed end to date
// the bytes its slave lacks (pkg/ackwait.Lag bounds the samples kept).
const lagSampleEvery = 10 * time.Millisecond

// syncService is the master's side of replication (one per master term):
// it answers the slave's sync requests with log bytes (the message log's
// written tail too, before its fdatasync; long-polling when there is
// nothing new), learns the slave's durable offsets from them, and holds
// send replies until the slave has their messages while the role loop
// says so (wait). It tells the slave to cut its copy back when the store
// cut a tail the slave may hold (see "Tentative tail" in doc.go). What it
// learns of the slave's requests (who, connected, slave lease) goes to the
// role loop through watch. A master without a role loop (no meta servers)
// turns the group readonly itself when its slave lags too long.
type syncService struct {
	b     *Broker
	t     *term
	store *store.Store
	opts  *Options
	lg    *zap.Logger

	// slaveMsg is the slave's durable message-log end; slaveAct the action
	// offset of its latest request and slaveActPrev of the one before (-1:
	// no slave yet). A fetch names what the slave received, which it may
	// not have written yet; the request after it (its acknowledgement or
	// the next fetch) comes only once it has, so the smaller of the two
	// is written.
	slaveMsg, slaveAct, slaveActPrev atomic.Int64
	slaveSeen                        atomic.Int64 // unix nanos of the last sync request
	// readonly is set while the slave lags past SlaveLagReadonly (WaitSlave,
	// a master without a role loop).
	readonly atomic.Bool
	// wait: send replies wait for the slave's copy (WaitSlave; the role loop
	// turns it on once it counts on a slave, failover.Server.WaitSlave).
	wait   atomic.Bool
	slaves *failover.SlaveWatch

	// pendingDups: dedupe keys of stored messages whose send replies wait
	// (or failed waiting) for the slave, with the offset it must pass.
	dupMu       sync.Mutex
	pendingDups pendingKeys
	lagNanos    atomic.Int64
	lagBytes    atomic.Int64
	served      atomic.Int64 // log bytes sent to the slave
	// resumedFrom is the message-log offset of the first sync request on
	// the slave's latest connection: where its copy stood when it
	// (re)connected.
	resumedFrom atomic.Int64

	mu sync.Mutex
	// Cuts (under mu): cutGen is the generation told to the slave, cuts[i]
	// the offset generation i+1 cut back to; storeGen is the store's cut
	// generation applied (appliedGen mirrors it for await's fast path).
	// pendingCut (-1: none) is the lowest cut the slave's copy may reach
	// past: a fetch from past it is answered with a cut, and one from at
	// or below it shows the copy holds nothing past it.
	cutGen     uint64
	cuts       []int64
	storeGen   uint64
	appliedGen atomic.Uint64
	pendingCut int64
	conn       *netserver.Conn // the connection of the latest sync request
	stream     syncStream      // the slave's fetches, answered in order
	waiters    ackwait.Waiters // send replies waiting for the slave, by offset
	lagDates   ackwait.Lag     // dates the ends the slave has not acknowledged
	closed     bool

	stop chan struct{}
	wg   sync.WaitGroup // syncWatchLoop and the long polls
}

func newSyncService(b *Broker, t *term) *syncService {
	y := &syncService{b: b, t: t, store: t.store, opts: &b.opts, lg: b.lg.Named("sync"), stop: make(chan struct{}),
		slaves: failover.NewSlaveWatch(b.opts.slaveLease(), 2*b.opts.SuspectAfter)}
	y.wait.Store(b.opts.WaitSlave && !b.managed())
	y.slaveMsg.Store(-1)
	y.slaveAct.Store(-1)
	y.slaveActPrev.Store(-1)
	y.pendingCut = -1
	return y
}

// applyCutsLocked takes the store's cuts since the last look as one
// generation: the slave's copy may reach past the lowest, and its durable
// end counts only up to it. y.mu must be held.
func (y *syncService) applyCutsLocked() {
	if y.cuts == nil {
		// The previous run may have served a tentative tail that its
		// recovery no longer found (a machine crash loses what was not
		// fdatasynced): this run starts with a cut at its recovered end,
		// generation 1, before it serves anything.
		y.storeGen = y.store.Source().MessageCutGen()
		y.appliedGen.Store(y.storeGen)
		start := y.store.Source().RecoveredMessageEnd()
		if y.t.promotedAt >= 0 {
			// A store promoted in place: this term served no tail before
			// its promotion point (the old master's tail past it is cut by
			// the epoch rule).
			start = y.t.promotedAt
		}
		y.cuts, y.cutGen, y.pendingCut = []int64{start}, 1, start
	}
	gen, low := y.store.Source().MessageCuts(y.storeGen)
	if gen == y.storeGen {
		return
	}
	y.storeGen = gen
	y.appliedGen.Store(gen)
	y.cuts = append(y.cuts, low)
	y.cutGen++
	if y.pendingCut < 0 || low < y.pendingCut {
		y.pendingCut = low
	}
	if y.slaveMsg.Load() > low {
		y.slaveMsg.Store(low)
	}
	y.lg.Warn("message log cut back past its written tail: the slave's copy is checked against the cut",
		zap.Int64("offset", low), zap.Uint64("generation", y.cutGen))
}

// ackCapLocked returns the highest durable end a request of generation gen
// can acknowledge: the lowest cut after gen (a slave that has not heard of
// a cut may hold bytes it replaced), or no cap (-1). A generation this
// master never told counts as 0. y.mu must be held.
func (y *syncService) ackCapLocked(gen uint64) int64 {
	if gen > y.cutGen {
		gen = 0
	}
	low := int64(-1)
	for _, c := range y.cuts[gen:] {
		if low < 0 || c < low {
			low = c
		}
	}
	return low
}

func (y *syncService) start() {
	y.mu.Lock()
	y.applyCutsLocked()
	y.mu.Unlock()
	y.wg.Add(1)
	go y.syncWatchLoop()
}

// close answers the long polls, fails the waiting send replies (with err;
// nil: shutting down) and waits for the service's goroutines.
func (y *syncService) close(err error) {
	y.mu.Lock()
	if y.closed {
		y.mu.Unlock()
		return
	}
	y.closed = true
	ws := y.waiters.TakeAll()
	y.mu.Unlock()
	close(y.stop)
	if err == nil {
		err = protocol.Errorf(protocol.StatusShuttingDown, "broker group "+y.opts.Group+" is shutting down before its slave confirmed the messages (stored on the master)")
	}
	for _, done := range ws {
		done(err)
	}
	y.wg.Wait()
}

// serveSync answers a CmdSyncLog request, on the event loop: an
// acknowledgement completes the send replies it covers at once (off the
// loop it waited for a serve goroutine, 0.6 ms on average in a
// --wait-slave run, NOTES.md), and a fetch is detached and answered by its
// own goroutine.
func (b *Broker) serveSync(r *netserver.Request) {
	y := b.cur().sync
	if y == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is a slave"))
		return
	}
	y.serve(r)
}

func (y *syncService) serve(r *netserver.Request) {
	q, err := protocol.DecodeSyncRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if q.Group != y.opts.Group {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("a slave of broker group %q asked the master of %q", q.Group, y.opts.Group)))
		return
	}
	if epoch := y.b.epoch(); q.Epoch != epoch {
		// Older: the slave must learn the new history first (CmdSyncEpoch).
		// Newer: this master has been replaced.
		r.ReplyError(protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf("sync from epoch %d, this master serves epoch %d", q.Epoch, epoch)))
		return
	}
	if ms, as := y.store.SegmentSizes(); q.MessageSegmentSize != ms || q.ActionSegmentSize != as {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf(
			"slave segment sizes (message %d, action %d) differ from the master's (message %d, action %d)",
			q.MessageSegmentSize, q.ActionSegmentSize, ms, as)))
		return
	}
	// The message offset is checked when it is read: a slave may be past
	// the committed end (a tentative tail), or past a cut.
	mEnd, aEnd := y.store.CommittedEnds()
	if q.ActionOffset > aEnd {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, fmt.Sprintf(
			"sync action offset %d is past the master's committed end %d", q.ActionOffset, aEnd)))
		return
	}
	y.slaves.Request(q.SlaveID, q.LeaseStamp)
	y.slaves.Conn(r.Conn.Done())
	gen := y.slaveAck(q.MessageDurable, q.ActionOffset, q.Generation)
	if q.MaxBytes == 0 {
		// An acknowledgement only (normally one-way: the reply is dropped).
		m := protocol.SyncChunk{Start: mEnd, End: mEnd, Offset: mEnd}
		a := protocol.SyncChunk{Start: aEnd, End: aEnd, Offset: aEnd}
		r.Reply(protocol.StatusOK, protocol.AppendSyncResponse(nil, &protocol.SyncResponse{Epoch: y.b.epoch(), Generation: gen, Cut: -1,
			LeaseStamp: failover.Stamp(), Message: m, Action: a}))
		return
	}
	ahead := r.Command() == protocol.CmdSyncLogAhead
	y.mu.Lock()
	if y.conn != r.Conn {
		y.conn = r.Conn
		y.resumedFrom.Store(q.MessageOffset)
		y.lg.Info("slave syncing", zap.Stringer("conn", r.Conn), zap.Int64("message_offset", q.MessageOffset), zap.Int64("action_offset", q.ActionOffset))
	}
	if y.closed {
		y.mu.Unlock()
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, "broker group "+y.opts.Group+" is shutting down"))
		return
	}
	if ahead && y.stream.conn != r.Conn {
		y.mu.Unlock()
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, "a pipelined sync fetch (sync-log-ahead) without a sync-log fetch before it on its connection"))
		return
	}
	var turn streamTurn
	if ahead {
		turn = y.stream.join()
	} else {
		turn = y.stream.restart(r.Conn)
	}
	y.wg.Add(1)
	y.mu.Unlock()
	go y.answer(r.Detach(), q, turn)
}

// syncBufs holds read buffers for answers. An answer with records hands
// its buffers to the connection (ReplyRetained: written without a copy)
// and they come back once written; the others are reused at once.
var syncBufs = sync.Pool{New: func() any { return new([2][]byte) }}

// answer replies with the bytes past the slave's offsets (the message
// log's written tail too), waiting up to the request's wait for some when
// there are none; or with a cut when the slave's copy may reach past one.
// A pipelined fetch (turn.prev) first waits for the answer before it in
// its stream and reads from where that one ended (syncStream).
func (y *syncService) answer(r *netserver.Request, q protocol.SyncRequest, turn streamTurn) {
	defer y.wg.Done()
	defer close(turn.mine)
	closed := false
	end := y.slaves.Begin()
	defer func() { end(closed) }()
	if turn.prev != nil {
		select {
		case <-turn.prev:
		case <-r.Done():
			closed = true
			return
		}
	}
	y.mu.Lock()
	msgFrom, actFrom := y.stream.from(turn, q.MessageOffset, q.ActionOffset)
	y.mu.Unlock()
	maxBytes := int(min(q.MaxBytes, uint32(y.opts.SyncMaxBytes)))
	wait := min(time.Duration(q.WaitMillis)*time.Millisecond, maxSyncWait)
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	bufs := syncBufs.Get().(*[2][]byte)
	retained := false // the reply holds bufs until it is written
	defer func() {
		if !retained {
			syncBufs.Put(bufs)
		}
	}()
	tailEnd := int64(-1) // the committed end when the copy had a tail past it
	for waited := false; ; {
		sig := y.store.Source().CommitSignal()
		gen := y.store.Source().MessageCutGen()
		// Actions first: the message end is loaded after them, so it
		// covers every message they name.
		ac, err := y.store.Source().ReadActionLogInto(bufs[1], actFrom, maxBytes)
		var mc store.LogChunk
		if err == nil {
			mc, err = y.store.Source().ReadMessageTailInto(bufs[0], msgFrom, maxBytes)
		}
		// Keep the larger buffers for the next answer.
		if cap(mc.Data) > cap(bufs[0]) {
			bufs[0] = mc.Data[:0]
		}
		if cap(ac.Data) > cap(bufs[1]) {
			bufs[1] = ac.Data[:0]
		}
		resp := protocol.SyncResponse{Epoch: y.b.epoch(), Cut: -1, LeaseStamp: failover.Stamp()}
		y.mu.Lock()
		y.applyCutsLocked()
		if y.storeGen != gen {
			y.mu.Unlock()
			continue // a cut overlapped the read
		}
		resp.Generation = y.cutGen
		if told := y.stream.cutTold(turn); told >= 0 {
			resp.Cut = told // sent before the slave heard of it
		} else if y.pendingCut >= 0 {
			if msgFrom > y.pendingCut {
				resp.Cut = y.pendingCut
				y.stream.cut(turn, resp.Cut)
			} else {
				// The slave asks from at or below the cut, after every
				// answer before this one on its connection (a pipelined
				// fetch: the one before it in its stream ended there, and
				// none of them was a cut): its copy holds nothing past
				// the cut.
				y.pendingCut = -1
			}
		}
		y.mu.Unlock()
		if resp.Cut >= 0 {
			resp.Message = protocol.SyncChunk{Start: mc.Start, End: mc.End, Offset: mc.Start}
			resp.Action = protocol.SyncChunk{Start: ac.Start, End: ac.End, Offset: ac.Start}
			r.Reply(protocol.StatusOK, protocol.AppendSyncResponse(nil, &resp))
			y.lg.Warn("the slave's copy reaches past a cut: it cuts back", zap.Int64("slave_offset", msgFrom), zap.Int64("cut", resp.Cut))
			return
		}
		if err != nil {
			status := protocol.StatusInternal
			if errors.Is(err, store.ErrBadOffset) {
				status = protocol.StatusBadRequest
			}
			r.ReplyError(protocol.Errorf(status, err.Error()))
			return
		}
		// A copy with a tentative tail hears at once when the committed
		// end moves (it indexes what became durable).
		moved := tailEnd >= 0 && mc.End != tailEnd
		if tailEnd < 0 && msgFrom > mc.End {
			tailEnd = mc.End
		}
		if len(mc.Data) > 0 || len(ac.Data) > 0 || moved || waited || wait == 0 {
			resp.Message = protocol.SyncChunk{Start: mc.Start, End: mc.End, Offset: mc.Offset, Data: mc.Data}
			resp.Action = protocol.SyncChunk{Start: ac.Start, End: ac.End, Offset: ac.Offset, Data: ac.Data}
			head := protocol.AppendSyncResponseHead(make([]byte, 0, 96), &resp)
			mid := protocol.AppendSyncChunkHead(make([]byte, 0, 32), &resp.Action)
			y.mu.Lock()
			y.stream.answered(turn, msgFrom, actFrom, mc, ac)
			y.mu.Unlock()
			retained = true
			y.served.Add(int64(len(mc.Data) + len(ac.Data)))
			r.ReplyRetained(protocol.StatusOK, func() { syncBufs.Put(bufs) }, head, mc.Data, mid, ac.Data)
			return
		}
		// Wait for a write or a commit (store.CommitSignal).
		select {
		case <-sig:
		case <-timeout:
			waited = true
		case <-r.Done():
			closed = true
			return
		case <-y.stop:
			waited = true
		}
	}
}

// slaveAck records the slave's durable ends and completes the send replies
// they cover; it returns the cut generation the master tells the slave.
// A durable end from a request of an older generation counts only up to
// the cuts it has not heard of, and none counts past a pending cut.
func (y *syncService) slaveAck(msg, act int64, gen uint64) uint64 {
	y.slaveSeen.Store(time.Now().UnixNano())
	y.slaveActPrev.Store(y.slaveAct.Swap(act)) // one connection: serial
	y.mu.Lock()
	y.applyCutsLocked()
	if c := y.ackCapLocked(gen); c >= 0 && msg > c {
		msg = c
	}
	if y.pendingCut >= 0 && msg > y.pendingCut {
		msg = y.pendingCut // the copy may reach past the cut
	}
	cur := y.cutGen
	if msg <= y.slaveMsg.Load() {
		y.mu.Unlock()
		return cur
	}
	y.slaveMsg.Store(msg)
	done := y.waiters.TakeUpTo(msg)
	y.lagDates.Acknowledged(msg)
	y.mu.Unlock()
	for _, f := range done {
		f(nil)
	}
	return cur
}

// admit refuses a send when too many replies wait for the slave or the
// slave lags past the readonly threshold.
func (y *syncService) admit() error {
	if !y.wait.Load() {
		return nil
	}
	if y.readonly.Load() {
		return protocol.Errorf(protocol.StatusReadonly, fmt.Sprintf("broker group %s is readonly: its slave lags more than %v", y.opts.Group, y.opts.SlaveLagReadonly))
	}
	y.mu.Lock()
	n := y.waiters.Len()
	y.mu.Unlock()
	if n >= y.opts.MaxWaitingAcks {
		return protocol.Errorf(protocol.StatusBusy, fmt.Sprintf("broker group %s: %d send replies wait for the slave", y.opts.Group, n))
	}
	return nil
}

// await runs done once the slave's durable message-log end reaches need
// (done(nil)), or with an error when the slave lags past the threshold or
// the broker closes. It never blocks (it runs on the store's commit
// goroutine).
func (y *syncService) await(need int64, done func(error)) {
	// A cut is recorded before the records that replace the cut ones are
	// written: a store generation not yet applied may lower slaveMsg.
	fresh := y.store.Source().MessageCutGen() == y.appliedGen.Load()
	if fresh && y.slaveMsg.Load() >= need || !y.wait.Load() {
		done(nil)
		return
	}
	y.mu.Lock()
	y.applyCutsLocked()
	if y.closed {
		y.mu.Unlock()
		done(protocol.Errorf(protocol.StatusShuttingDown, "broker group "+y.opts.Group+" is shutting down"))
		return
	}
	if y.readonly.Load() {
		y.mu.Unlock()
		done(y.lagError())
		return
	}
	y.waiters.Add(need, done)
	y.mu.Unlock()
	// The slave may have acked meanwhile, or the role loop stopped waiting.
	if m := y.slaveMsg.Load(); m >= need {
		y.completeUpTo(m)
	}
	if !y.wait.Load() {
		y.failWaiting(nil)
	}
}

// setWait makes send replies wait for the slave (on) or not (off: the
// waiting ones complete). Turning it on returns the switch point, the
// committed end once it is on: a reply made without the slave covers
// messages below it (the store publishes a commit group before its
// replies are made, and a reply looks at wait when it is made).
func (y *syncService) setWait(on bool) int64 {
	if y.wait.Swap(on) == on {
		end, _ := y.store.CommittedEnds()
		return end
	}
	if on {
		end, _ := y.store.CommittedEnds()
		return end
	}
	y.failWaiting(nil)
	return 0
}

// failWaiting completes every reply waiting for the slave: with err, or
// acknowledged when err is nil (the role loop no longer counts on a slave).
func (y *syncService) failWaiting(err error) {
	y.mu.Lock()
	done := y.waiters.TakeAll()
	y.mu.Unlock()
	for _, f := range done {
		f(err)
	}
}

// completeUpTo completes the waiters covered by msg.
func (y *syncService) completeUpTo(msg int64) {
	y.mu.Lock()
	done := y.waiters.TakeUpTo(msg)
	y.lagDates.Acknowledged(msg)
	y.mu.Unlock()
	for _, f := range done {
		f(nil)
	}
}

func (y *syncService) lagError() error {
	return protocol.Errorf(protocol.StatusReadonly, fmt.Sprintf(
		"broker group %s: the slave did not copy the messages within %v (stored on the master only; the group is readonly until the slave catches up)",
		y.opts.Group, y.opts.SlaveLagReadonly))
}

// syncWatchLoop dates the bytes the slave lacks and applies the readonly
// rule: with WaitSlave, a slave whose copy is older than SlaveLagReadonly
// makes the group readonly (waiting replies fail with StatusReadonly, the
// meta server hears GroupReadonly) until it has caught up.
func (y *syncService) syncWatchLoop() {
	defer y.wg.Done()
	t := time.NewTicker(lagSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-y.stop:
			return
		case now := <-t.C:
			y.watch(now)
		}
	}
}

func (y *syncService) watch(now time.Time) {
	end, _ := y.store.CommittedEnds()
	slave := y.slaveMsg.Load()
	if slave >= end {
		y.dupMu.Lock()
		y.pendingDups.shrink(slave)
		y.dupMu.Unlock()
	}
	y.mu.Lock()
	y.lagDates.Sample(end, slave, now)
	lag := y.lagDates.Age(now)
	var failed []func(error)
	wasReadonly := y.readonly.Load()
	switch {
	case y.opts.WaitSlave && !y.b.managed() && lag > y.opts.SlaveLagReadonly && !wasReadonly:
		y.readonly.Store(true)
		failed = y.waiters.TakeAll()
	case wasReadonly && lag == 0:
		y.readonly.Store(false)
	}
	y.mu.Unlock()
	y.lagNanos.Store(int64(lag))
	y.lagBytes.Store(max(end-max(slave, 0), 0))
	if len(failed) > 0 || (y.readonly.Load() != wasReadonly) {
		y.lg.Warn("slave lag readonly rule", zap.Bool("readonly", y.readonly.Load()), zap.Duration("lag", lag),
			zap.Int64("slave_offset", slave), zap.Int64("committed", end), zap.Int("failed_replies", len(failed)))
	}
	if len(failed) > 0 {
		err := y.lagError()
		for _, done := range failed {
			done(err)
		}
	}
}

// actionFloor is the store's ActionLogFloor: checkpoints keep the action
// log the slave has not copied yet, while a slave has been seen in the
// last actionFloorFor.
func (y *syncService) actionFloor() int64 {
	seen := y.slaveSeen.Load()
	if seen == 0 || time.Since(time.Unix(0, seen)) > actionFloorFor {
		return -1
	}
	if prev := y.slaveActPrev.Load(); prev >= 0 {
		return min(prev, y.slaveAct.Load())
	}
	return y.slaveAct.Load()
}

// actionFloorFor is how long after its last sync request a slave's action
// offset still holds back action-log deletion.
const actionFloorFor = 10 * time.Minute

func (y *syncService) waiting() int {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.waiters.Len()
}

// replyStored answers a send once its stored messages are covered by the
// slave's copy (while the role loop says replies wait), or at once. While a
// reply waits, its messages' dedupe keys are pending: a resent copy is
// answered StatusBusy, not StatusDuplicate, until the slave holds the first
// copy (a duplicate answer acknowledges it: it must be as safe as the first
// answer). A master that writes under a lease (async mode) checks its gate
// again before it acknowledges: the lease may have run out since the
// messages were taken.
//
// A reply that waits frees the call once it is made, unless the caller
// frees it itself (direct: a call whose records TryWriteViewsNow wrote,
// which AfterWrite frees; the reply then keeps a copy of the statuses).
func (b *Broker) replyStored(s *sendCall, results []store.Result, direct bool) (held bool) {
	r, statuses, y := s.r, s.statuses, s.t.sync
	if !b.opts.WaitSlave && !b.gate.Open() {
		r.ReplyError(b.gate.Err())
		return false
	}
	// The slave's durable end is a record boundary: past a record's offset
	// means past its end.
	need := int64(-1)
	if y.wait.Load() {
		for _, res := range results {
			if res.Err == nil {
				need = max(need, res.Offset+1)
			}
		}
	}
	if need < 0 {
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		return false
	}
	if s.t.dedupe.enabled() {
		settled := y.slaveMsg.Load()
		y.dupMu.Lock()
		for j, res := range results {
			if i := s.index[j]; res.Err == nil && s.reserved[i] {
				y.pendingDups.add(s.keys[i], res.Offset+1, settled)
			}
		}
		y.dupMu.Unlock()
	}
	if direct {
		// The role loop turned waiting on after the send chose the direct
		// path: AfterWrite frees the call before the reply is made.
		statuses = slices.Clone(statuses)
	}
	stored := time.Now()
	y.await(need, func(err error) {
		b.metrics.slaveWait.Observe(time.Since(stored).Seconds())
		if err != nil {
			// The keys stay pending until the slave holds their messages.
			r.ReplyError(err)
		} else {
			r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		}
		if !direct {
			s.free() // the reply is encoded: the call and its slices are reused
		}
	})
	return true
}

// duplicateStatus answers a message whose dedupe key is known: a
// duplicate, or busy while the first copy is not yet in the slave's copy
// (its reply waits, or failed waiting). A master whose replies do not wait
// for a slave answers without waiting, and so does its duplicate answer.
func (t *term) duplicateStatus(k uint64) protocol.Status {
	if y := t.sync; y != nil && y.wait.Load() {
		y.dupMu.Lock()
		pending := y.pendingDups.pending(k, y.slaveMsg.Load())
		y.dupMu.Unlock()
		if pending {
			return protocol.StatusBusy
		}
	}
	return protocol.StatusDuplicate
}

// slaveWrote returns the ends of what the slave has written: its durable
// message-log end and the smaller of its last two action offsets.
func (y *syncService) slaveWrote() (message, action int64) {
	action = y.slaveAct.Load()
	if prev := y.slaveActPrev.Load(); prev >= 0 {
		action = min(action, prev)
	}
	return y.slaveMsg.Load(), action
}
