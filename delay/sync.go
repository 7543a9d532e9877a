package delay

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/ackwait"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// maxSyncWait caps how long a master holds a manifest request.
const maxSyncWait = 10 * time.Second

// lagSampleEvery is how often the master samples its message-log end to
// date the bytes its slave lacks (pkg/ackwait.Lag bounds the samples kept).
const lagSampleEvery = 10 * time.Millisecond

// source is the master's side of replication: it answers the slave's
// manifest and read requests (CmdDelaySyncManifest long-polls on the
// store's changes), learns from each manifest request how far the slave's
// copy durably goes, and holds send replies until the slave has their
// messages while the role loop says so (wait). What it learns of the
// slave's requests (who, connected, slave lease) goes to the role loop
// through slaves. A master without a role loop turns the group readonly
// itself when the slave lags too long (WaitSlave).
type source struct {
	m     *master
	store *store.Store
	opts  *Options
	lg    *zap.Logger

	acked    atomic.Int64 // the slave's acknowledged replay position (-1: none yet)
	wait     atomic.Bool  // send replies wait for the slave (the role loop's failover.Server.WaitSlave)
	slaves   *failover.SlaveWatch
	seen     atomic.Int64 // unix nanos of the slave's last request
	readonly atomic.Bool
	lagNanos atomic.Int64
	lagBytes atomic.Int64
	served   atomic.Int64 // file bytes sent to the slave
	// The run and version the slave's copy holds, as its last manifest
	// request named them.
	slaveRun, slaveSince atomic.Uint64

	mu       sync.Mutex
	waiters  ackwait.Waiters // send replies waiting for the slave, by offset
	lagDates ackwait.Lag     // dates the ends the slave has not acknowledged
	closed   bool

	stop chan struct{}
	wg   sync.WaitGroup // watchLoop and the requests being answered
}

func newSource(m *master) *source {
	y := &source{m: m, store: m.store, opts: &m.s.opts, lg: m.lg.Named("sync"), stop: make(chan struct{}),
		slaves: failover.NewSlaveWatch(m.s.opts.slaveLease(), 2*m.s.opts.SuspectAfter)}
	y.acked.Store(-1)
	y.wait.Store(m.s.opts.WaitSlave && len(m.s.opts.MetaServers) == 0)
	return y
}

func (y *source) start() {
	y.wg.Add(1)
	go y.watchLoop()
}

// close answers the long polls, fails the waiting send replies and waits
// for the source's goroutines.
func (y *source) close() {
	y.mu.Lock()
	if y.closed {
		y.mu.Unlock()
		return
	}
	y.closed = true
	ws := y.waiters.TakeAll()
	y.mu.Unlock()
	close(y.stop)
	err := protocol.Errorf(protocol.StatusShuttingDown, "delay group "+y.opts.Group+
		": the master stopped before its slave confirmed the messages (stored on the master)")
	for _, done := range ws {
		done(err)
	}
	y.wg.Wait()
}

// check validates what every sync request carries.
func (y *source) check(group string, epoch uint64) error {
	if group != y.opts.Group {
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("a slave of delay group %q asked the master of %q", group, y.opts.Group))
	}
	if mine := y.m.epoch.Load(); epoch > mine {
		return protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
			"the slave follows epoch %d; this master serves epoch %d (it has been deposed)", epoch, mine))
	}
	return nil
}

// goAnswer runs fn on a goroutine the source waits for, unless closed.
func (y *source) goAnswer(r *netserver.Request, fn func()) {
	y.mu.Lock()
	if y.closed {
		y.mu.Unlock()
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, "delay group "+y.opts.Group+": the master is stopping"))
		return
	}
	y.wg.Add(1)
	y.mu.Unlock()
	go func() {
		defer y.wg.Done()
		fn()
	}()
}

func (y *source) serveManifest(r *netserver.Request) {
	q, err := protocol.DecodeDelayManifestRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := y.check(q.Group, q.Epoch); err != nil {
		r.ReplyError(err)
		return
	}
	y.slaves.Request(q.SlaveID, q.LeaseStamp)
	y.slaves.Conn(r.Conn.Done())
	y.slaveRun.Store(q.Run)
	y.slaveSince.Store(q.Since)
	y.slaveAck(q.Acked)
	y.goAnswer(r, func() { y.answerManifest(r, q) })
}

// answerManifest replies with the hours changed since the request's
// version, waiting up to its wait when none did.
func (y *source) answerManifest(r *netserver.Request, q protocol.DelayManifestRequest) {
	closed := false
	end := y.slaves.Begin()
	defer func() { end(closed) }()
	wait := min(time.Duration(q.WaitMillis)*time.Millisecond, maxSyncWait)
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for waited := false; ; {
		sig := y.store.ChangeSignal()
		man := y.store.Manifest(q.Run, q.Since)
		if !man.CaughtUp {
			r.ReplyError(protocol.Errorf(protocol.StatusRetryLater, "delay group "+y.opts.Group+": the master is still replaying its log"))
			return
		}
		if man.Full || len(man.Hours) > 0 || waited || wait == 0 {
			p := protocol.DelayManifestResponse{Epoch: y.m.epoch.Load(), Store: man.Store, Run: man.Run, Version: man.Version,
				Replayed: man.Replayed, LeaseStamp: failover.Stamp(), Hours: make([]protocol.DelayHour, len(man.Hours))}
			if man.Full {
				p.Flags |= protocol.DelayManifestFull
			}
			for i, h := range man.Hours {
				p.Hours[i] = protocol.DelayHour{Hour: h.Hour, ScheduleSize: h.ScheduleSize, Records: h.Records, DispatchSize: h.DispatchSize}
				if h.Removed {
					p.Hours[i].Flags = protocol.DelayHourRemoved
				}
			}
			r.Reply(protocol.StatusOK, protocol.AppendDelayManifestResponse(nil, &p))
			return
		}
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

func (y *source) serveRead(r *netserver.Request) {
	q, err := protocol.DecodeDelayReadRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := y.check(q.Group, q.Epoch); err != nil {
		r.ReplyError(err)
		return
	}
	y.slaves.Seen()
	y.goAnswer(r, func() { y.answerRead(r, q) })
}

// answerRead replies with whole records of the ranges asked for, in order,
// up to the request's (and SyncMaxBytes') budget. A range of an hour that
// no longer exists is skipped (the next manifest says it is removed).
func (y *source) answerRead(r *netserver.Request, q protocol.DelayReadRequest) {
	budget := int(min(q.MaxBytes, uint32(y.opts.SyncMaxBytes)))
	var parts [][]byte
	head := make([]byte, 0, 64)
	chunks, sent := 0, 0
	for _, g := range q.Ranges {
		if budget <= 0 {
			break
		}
		var b []byte
		var err error
		if g.File == protocol.DelayScheduleFile {
			b, err = y.store.ReadSchedule(g.Hour, g.From, g.To, budget)
		} else {
			b, err = y.store.ReadDispatch(g.Hour, g.From, g.To, budget)
		}
		if errors.Is(err, store.ErrNoHour) {
			continue
		}
		if err != nil {
			status := protocol.StatusInternal
			if errors.Is(err, store.ErrCorrupt) {
				status = protocol.StatusBadRequest // not a record start: the copy does not match
			}
			r.ReplyError(protocol.Errorf(status, err.Error()))
			return
		}
		if len(b) == 0 {
			continue
		}
		c := protocol.DelayChunk{Hour: g.Hour, File: g.File, Offset: g.From, Data: b}
		parts = append(parts, protocol.AppendDelayChunkHead(nil, &c), b)
		budget -= len(b)
		sent += len(b)
		chunks++
	}
	head = protocol.AppendDelayReadResponseHead(head, y.m.epoch.Load(), chunks)
	r.Reply(protocol.StatusOK, append([][]byte{head}, parts...)...)
	y.served.Add(int64(sent))
}

// slaveAck records the slave's acknowledged replay position and completes
// the send replies it covers.
func (y *source) slaveAck(pos int64) {
	y.seen.Store(time.Now().UnixNano())
	if pos <= y.acked.Load() {
		return
	}
	y.acked.Store(pos)
	y.completeUpTo(pos)
}

// admit refuses a send when too many replies wait for the slave or the
// slave lags past the readonly threshold.
func (y *source) admit() error {
	if !y.wait.Load() {
		return nil
	}
	if y.readonly.Load() {
		return y.lagError()
	}
	if n := y.waiting(); n >= y.opts.MaxWaitingAcks {
		return protocol.Errorf(protocol.StatusBusy, fmt.Sprintf("delay group %s: %d send replies wait for the slave", y.opts.Group, n))
	}
	return nil
}

// await runs done once the slave has acknowledged a replay position of at
// least need, or with an error when the slave lags past the threshold or
// the master stops. It never blocks (it runs on the store's goroutine).
func (y *source) await(need int64, done func(error)) {
	if y.acked.Load() >= need || !y.wait.Load() {
		done(nil)
		return
	}
	y.mu.Lock()
	if y.closed {
		y.mu.Unlock()
		done(protocol.Errorf(protocol.StatusShuttingDown, "delay group "+y.opts.Group+": the master is stopping"))
		return
	}
	if y.readonly.Load() {
		y.mu.Unlock()
		done(y.lagError())
		return
	}
	y.waiters.Add(need, done)
	y.mu.Unlock()
	if a := y.acked.Load(); a >= need { // the slave may have acked meanwhile
		y.completeUpTo(a)
	}
	if !y.wait.Load() { // or the role loop stopped waiting
		y.failWaiting(nil)
	}
}

// setWait makes send replies wait for the slave (on) or not (off: the
// waiting ones complete). Turning it on returns the switch point, the
// message log's end once it is on: a reply made without the slave covers
// messages below it (a reply looks at wait after its messages are stored).
func (y *source) setWait(on bool) int64 {
	if y.wait.Swap(on) != on && !on {
		y.failWaiting(nil)
	}
	return y.store.LogEnd()
}

// failWaiting completes every reply waiting for the slave: with err, or
// acknowledged when err is nil (the role loop no longer counts on a slave).
func (y *source) failWaiting(err error) {
	y.mu.Lock()
	done := y.waiters.TakeAll()
	y.mu.Unlock()
	for _, f := range done {
		f(err)
	}
}

func (y *source) completeUpTo(pos int64) {
	y.mu.Lock()
	done := y.waiters.TakeUpTo(pos)
	y.lagDates.Acknowledged(pos)
	y.mu.Unlock()
	for _, f := range done {
		f(nil)
	}
}

func (y *source) lagError() error {
	return protocol.Errorf(protocol.StatusReadonly, fmt.Sprintf(
		"delay group %s: the slave did not copy the messages within %v (stored on the master only; the group is readonly until the slave catches up)",
		y.opts.Group, y.opts.SlaveLagReadonly))
}

// slaveConnected reports whether a slave asked for a manifest recently.
func (y *source) slaveConnected() bool {
	seen := y.seen.Load()
	return seen != 0 && time.Since(time.Unix(0, seen)) < max(3*y.opts.SyncWait, 3*time.Second)
}

// slaveHoldsAll reports whether the slave's copy holds every hour file at
// its current size (its last manifest request named the store's current
// version) and has acknowledged the whole message log.
func (y *source) slaveHoldsAll() bool {
	man := y.store.Manifest(y.slaveRun.Load(), y.slaveSince.Load())
	return !man.Full && len(man.Hours) == 0 && man.Replayed >= y.store.LogEnd() && y.acked.Load() >= man.Replayed
}

func (y *source) waiting() int {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.waiters.Len()
}

// lag returns how far the slave is behind: message-log bytes replayed on
// the master that its copy lacks, and the age of the oldest of them.
func (y *source) lag() (int64, time.Duration) {
	return y.lagBytes.Load(), time.Duration(y.lagNanos.Load())
}

// watchLoop dates the bytes the slave lacks and applies the readonly rule:
// with WaitSlave, a slave whose copy is older than SlaveLagReadonly makes
// the group readonly (waiting replies fail with StatusReadonly, the meta
// server hears GroupReadonly) until it has caught up.
func (y *source) watchLoop() {
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

func (y *source) watch(now time.Time) {
	end := y.store.LogEnd()
	acked := y.acked.Load()
	y.mu.Lock()
	y.lagDates.Sample(end, acked, now)
	lag := y.lagDates.Age(now)
	var failed []func(error)
	wasReadonly := y.readonly.Load()
	switch {
	case y.opts.WaitSlave && len(y.opts.MetaServers) == 0 && lag > y.opts.SlaveLagReadonly && !wasReadonly:
		y.readonly.Store(true)
		failed = y.waiters.TakeAll()
	case wasReadonly && lag == 0:
		y.readonly.Store(false)
	}
	y.mu.Unlock()
	y.lagNanos.Store(int64(lag))
	y.lagBytes.Store(max(end-max(acked, 0), 0))
	if y.readonly.Load() != wasReadonly {
		y.lg.Warn("slave lag readonly rule", zap.Bool("readonly", y.readonly.Load()), zap.Duration("lag", lag),
			zap.Int64("slave_acked", acked), zap.Int64("log_end", end), zap.Int("failed_replies", len(failed)))
	}
	if len(failed) > 0 {
		err := y.lagError()
		for _, done := range failed {
			done(err)
		}
	}
}

// serveOrigin answers CmdDelaySyncOrigin: the store's ID, its parent and
// the hour sizes they share (a rejoining parent keeps that much).
func (y *source) serveOrigin(r *netserver.Request) {
	q, err := protocol.DecodeDelayOriginRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := y.check(q.Group, q.Epoch); err != nil {
		r.ReplyError(err)
		return
	}
	o := y.store.Origin()
	p := protocol.DelayOrigin{Store: y.store.ID(), Parent: o.Parent, Hours: make([]protocol.DelayHour, len(o.Hours))}
	for i, h := range o.Hours {
		p.Hours[i] = protocol.DelayHour{Hour: h.Hour, ScheduleSize: h.ScheduleSize, DispatchSize: h.DispatchSize}
	}
	r.Reply(protocol.StatusOK, protocol.AppendDelayOrigin(nil, &p))
}
