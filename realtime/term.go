package realtime

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// term is the role a broker serves in, with what it owns in it: a master's
// store, log shipping (syncService), dedupe table and loops, or a slave's
// copy and its replica loop. A term does not change; a role change makes a
// new one and swaps Broker.term (under roleMu):
//
//   - promotion (slave → master) promotes the copy's store where it is
//     (store.Promote: no reopening) and starts a master's term on it;
//   - demotion (master → slave) stops the master's term, closes its store
//     and reopens it as a copy;
//   - a cut back (the copy holds records its new master does not) closes
//     the copy, truncates it (store.Truncate) and reopens it.
//
// Handlers load the term once per request; one that finds a store closed
// by a change answers with the store's error, and the change's new term
// serves the next request.
type term struct {
	role         string
	store        *store.Store
	sync         *syncService // a master's
	replica      *replica     // a slave's
	dedupe       *dedupe      // a master's
	dedupeSeeded chan struct{}
	broken       bool // a slave whose store could not be reopened: StartCopy tries again
	// promotedAt is the message-log end a master's term was promoted at in
	// place (-1: the store was opened as a master's).
	promotedAt int64

	stop     chan struct{} // ends the term's loops
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// openTerm opens the store in role and what the role needs around it.
func (b *Broker) openTerm(role string) (*term, error) {
	st, err := store.Open(b.opts.DataDir, storeOptions(b.opts, role == RoleSlave, b.onAppend, b.actionFloor), b.lg)
	if err != nil {
		return nil, fmt.Errorf("realtime: open store: %w", err)
	}
	t, err := b.newTerm(role, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return t, nil
}

// newTerm makes a term of role on an open store.
func (b *Broker) newTerm(role string, st *store.Store) (*term, error) {
	t := &term{role: role, store: st, promotedAt: -1, stop: make(chan struct{})}
	if role == RoleMaster {
		t.dedupe = newDedupe(b.opts.DedupeWindow, b.opts.DedupeCapacity, time.Now)
		t.dedupeSeeded = make(chan struct{})
		t.sync = newSyncService(b, t)
		return t, nil
	}
	r, err := newReplica(b, t)
	if err != nil {
		return nil, err
	}
	t.replica = r
	return t, nil
}

// startTerm starts the term's loops: a master's log shipping, liveness,
// fair share and dedupe seeding; a slave's copy (unless it is stopped for
// a campaign).
func (b *Broker) startTerm(t *term) {
	if t.sync != nil {
		t.sync.start()
		t.wg.Add(1)
		go b.livenessLoop(t)
		if b.fair.enabled() {
			t.wg.Add(1)
			go b.pressureLoop(t)
		}
		if t.dedupe.enabled() {
			t.wg.Add(1)
			go b.seedDedupeLoop(t)
		}
	}
	if t.replica != nil && !b.copyStopped {
		t.replica.start()
	}
}

// stopTerm stops the term's own loops and waits for them.
func (b *Broker) stopTerm(t *term) {
	t.stopOnce.Do(func() { close(t.stop) })
	t.wg.Wait()
}

// actionFloor is the store's ActionLogFloor: a master's slave's copy (see
// syncService.actionFloor); none on a slave.
func (b *Broker) actionFloor() int64 {
	if t := b.cur(); t != nil && t.sync != nil {
		return t.sync.actionFloor()
	}
	return -1
}

// Promote makes the slave its group's master at epoch (failover.Server):
// its copy stopped (StopCopy), the store takes writes where it is, the
// epoch's start is recorded, and a master's term serves. The master serves
// alone (replies do not wait for a slave) until the role loop counts on a
// slave again.
func (b *Broker) Promote(epoch uint64) error {
	b.roleMu.Lock()
	defer b.roleMu.Unlock()
	t := b.cur()
	if t.replica == nil || t.broken {
		return errors.New("realtime: promote: not a slave with an open copy")
	}
	t.replica.close()
	start := time.Now()
	if err := t.store.Replica().Promote(); err != nil {
		return fmt.Errorf("realtime: promote: %w", err)
	}
	nt, err := b.newTerm(RoleMaster, t.store)
	if err != nil {
		return err
	}
	nt.promotedAt, _ = nt.store.CommittedEnds()
	if err := b.beginEpoch(nt.store, epoch); err != nil {
		return err // the store takes writes but the epoch is not recorded: StartCopy reopens it as a copy
	}
	b.live.reset()
	b.dead.reset()
	b.term.Store(nt)
	b.startTerm(nt)
	b.lg.Warn("promoted: serving as master", zap.Uint64("epoch", epoch), zap.Duration("took", time.Since(start)))
	return nil
}

// NewEpoch records that the master serves epoch from its current ends on
// (failover.Server).
func (b *Broker) NewEpoch(epoch uint64) error { return b.beginEpoch(b.st(), epoch) }

// Demote turns the master into a slave (failover.Server): the replies
// waiting for its slave fail (never acknowledged), its pulls are answered,
// its term stops, and its store reopens as a copy that follows the group's
// master.
func (b *Broker) Demote() error {
	b.roleMu.Lock()
	defer b.roleMu.Unlock()
	t := b.cur()
	if t.sync == nil {
		return nil
	}
	select {
	case <-b.stop:
		return nil // closing
	default:
	}
	t.sync.close(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+
		": this master was replaced before its slave confirmed the messages (stored on the old master only)"))
	b.shutdownPulls()
	b.stopTerm(t)
	b.lg.Warn("demoted: reopening the store as a copy")
	// A master that won its group as a slave stopped its copy for the
	// campaign; demoted, it copies again (failover.Server.Demote).
	b.copyStopped = false
	return b.reopenAsSlave(t, nil)
}

// reopenAsSlave closes t's store, cuts it back when cut says so, and opens
// it as a copy in a new term. roleMu is held.
func (b *Broker) reopenAsSlave(t *term, cut *truncation) error {
	if err := t.store.Close(); err != nil {
		b.lg.Warn("closing the store before reopening it", zap.Error(err))
	}
	if cut != nil {
		rep, err := store.Truncate(b.opts.DataDir, storeOptions(b.opts, true, nil, nil), cut.Message, cut.Action, b.lg)
		if err == nil {
			err = b.setHistory(cut.History)
		}
		if err != nil {
			b.lg.Error("cannot cut the copy back", zap.Error(err))
		} else {
			b.lg.Warn("copy cut back to the master's history", zap.Int64("message_offset", cut.Message), zap.Int64("action_offset", cut.Action),
				zap.Int64("message_bytes_cut", rep.MessageCut), zap.Int64("action_bytes_cut", rep.ActionCut), zap.Bool("wiped", rep.Wiped))
		}
	}
	var nt *term
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if nt, err = b.openTerm(RoleSlave); err == nil {
			break
		}
		b.lg.Error("cannot open the store as a copy; retrying", zap.Error(err))
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		b.term.Store(&term{role: RoleSlave, store: t.store, broken: true, stop: make(chan struct{})})
		return err
	}
	b.term.Store(nt)
	b.startTerm(nt)
	return nil
}

// StopCopy stops the slave's copy (failover.Server): once it returns no
// acknowledgement leaves for the master until StartCopy.
func (b *Broker) StopCopy() {
	b.roleMu.Lock()
	defer b.roleMu.Unlock()
	b.copyStopped = true
	if t := b.cur(); t.replica != nil {
		t.replica.close()
	}
}

// StartCopy copies again (failover.Server), reopening the store as a copy
// when a failed promotion or reopening left it otherwise.
func (b *Broker) StartCopy() {
	b.roleMu.Lock()
	defer b.roleMu.Unlock()
	b.copyStopped = false
	t := b.cur()
	if t.sync != nil {
		return
	}
	select {
	case <-b.stop:
		return
	default:
	}
	if t.broken || !t.store.Replica().Active() {
		b.stopTerm(t)
		if err := b.reopenAsSlave(t, nil); err != nil {
			b.lg.Error("cannot reopen the store as a copy", zap.Error(err))
		}
		return
	}
	nt, err := b.newTerm(RoleSlave, t.store)
	if err != nil {
		b.lg.Error("cannot copy again", zap.Error(err))
		return
	}
	b.term.Store(nt)
	b.startTerm(nt)
}

// startTruncate cuts the copy of term t back (the replica learnt it holds
// records its master does not), on a goroutine of the broker's.
func (b *Broker) startTruncate(t *term, cut truncation) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.roleMu.Lock()
		defer b.roleMu.Unlock()
		select {
		case <-b.stop:
			return
		default:
		}
		if b.cur() != t {
			return // the role changed meanwhile
		}
		t.replica.close()
		b.stopTerm(t)
		if err := b.reopenAsSlave(t, &cut); err != nil {
			b.lg.Error("cannot open the copy again after cutting it back", zap.Error(err))
		}
	}()
}

// following is the address of the master a slave copies from: the fixed
// Options.Master, or the group's master as the meta servers name it.
func (b *Broker) following() string {
	switch {
	case b.opts.Master != "":
		return b.opts.Master
	case b.member.Load() != nil:
		return b.member.Load().Following()
	case b.keeper != nil:
		if r := b.keeper.Registration(); r != nil {
			return r.Master()
		}
	}
	return ""
}

// epoch is the epoch the broker serves in: the newest of its history (a
// master's own, a slave's master's as agreed).
func (b *Broker) epoch() uint64 {
	b.histMu.Lock()
	defer b.histMu.Unlock()
	return failover.LastEpoch(b.history)
}

// checkEpoch refuses a request that carries a newer epoch than the
// master's: the client learnt of a master elected after this one. A broker
// that knows no epoch (no meta server, or not registered yet) checks
// nothing.
func (b *Broker) checkEpoch(t *term, e uint64) error {
	if mine := b.epoch(); mine > 0 && e > mine && t.sync != nil {
		return protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
			"broker group %s: the request is for epoch %d, this master serves epoch %d (replaced)", b.opts.Group, e, mine))
	}
	return nil
}

func (b *Broker) epochHistory() []protocol.EpochStart {
	b.histMu.Lock()
	defer b.histMu.Unlock()
	return append([]protocol.EpochStart(nil), b.history...)
}

// setHistory makes h the broker's epoch history, on disk first.
func (b *Broker) setHistory(h []protocol.EpochStart) error {
	b.histMu.Lock()
	defer b.histMu.Unlock()
	if failover.HistoryEqual(h, b.history) {
		return nil
	}
	if err := failover.SaveHistory(b.opts.DataDir, h); err != nil {
		return err
	}
	b.history = append([]protocol.EpochStart(nil), h...)
	return nil
}

// beginEpoch records that this master writes in epoch e from st's
// committed ends on (before it takes a write in it).
func (b *Broker) beginEpoch(st *store.Store, e uint64) error {
	m, a := st.CommittedEnds()
	h := failover.WithEpoch(b.epochHistory(), e, m, a)
	if err := b.setHistory(h); err != nil {
		return err
	}
	b.lg.Info("serving epoch", zap.Uint64("epoch", e), zap.Int64("message_start", m), zap.Int64("action_start", a))
	return nil
}

// truncation is what a slave learnt from its master's CmdSyncEpoch answer
// when its copy holds records the master does not: cut both logs back to
// these offsets and take the master's history.
type truncation struct {
	Message, Action int64
	History         []protocol.EpochStart
}

func (t *truncation) Error() string {
	return fmt.Sprintf("the copy holds records its master does not: it must be cut back to message offset %d, action offset %d", t.Message, t.Action)
}

// serveSyncEpoch answers a slave's CmdSyncEpoch: where its copy stops
// agreeing with this master's logs, and this master's history.
func (b *Broker) serveSyncEpoch(r *netserver.Request) {
	t := b.cur()
	if t.sync == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is a slave"))
		return
	}
	q, err := protocol.DecodeSyncEpochRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if q.Group != b.opts.Group {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("a slave of broker group %q asked the master of %q", q.Group, b.opts.Group)))
		return
	}
	if b.gate.State() == protocol.WriteDeposed {
		r.ReplyError(b.gate.Err())
		return
	}
	h := b.epochHistory()
	if s, m := failover.LastEpoch(q.History), failover.LastEpoch(h); s > m {
		r.ReplyError(protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
			"broker group %s: the slave has copied epoch %d, this master's newest is %d (it has been replaced)", b.opts.Group, s, m)))
		return
	}
	mEnd, aEnd := t.store.CommittedEnds()
	msg, act := failover.Divergence(h, q.History, mEnd, aEnd)
	r.Reply(protocol.StatusOK, protocol.AppendSyncEpochResponse(nil, &protocol.SyncEpochResponse{
		TruncateMessage: msg, TruncateAction: act, History: h}))
}
