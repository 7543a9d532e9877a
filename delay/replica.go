package delay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// maxReadRanges bounds the ranges of one read request.
const maxReadRanges = 1024

// slave is the slave role: replicaLoop copies the master's hour files into
// a store.Replica.
type slave struct {
	s       *Server
	lg      *zap.Logger
	replica *store.Replica
	client  *transport.Client

	synced     atomic.Bool  // the copy follows a master's store (it has synced once)
	applied    atomic.Bool  // a manifest was applied in this run: the ack is exact
	lagBytes   atomic.Int64 // bytes of the last manifest not copied yet
	caughtUpAt atomic.Int64 // unix nanos: the copy last held all the master listed
	polling    atomic.Bool  // caught up, waiting for the master's next change
	errors     atomic.Int64
	following  atomic.Pointer[string]

	mu      sync.Mutex // ctx, cancel and client of the running copy
	ctx     context.Context
	cancel  context.CancelFunc
	running bool
	wg      sync.WaitGroup
}

// openSlave opens the slave's copy in the data directory.
func openSlave(s *Server) (*slave, error) {
	r, err := store.OpenReplica(s.opts.DataDir, s.lg)
	if err != nil {
		return nil, fmt.Errorf("delay: open replica: %w", err)
	}
	y := &slave{s: s, lg: s.lg.Named("replica"), replica: r}
	_, marked := r.Following()
	y.synced.Store(marked)
	y.caughtUpAt.Store(time.Now().UnixNano())
	return y, nil
}

// start runs replicaLoop (again after stop).
func (y *slave) start() {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.running {
		return
	}
	to := transport.Options{RequestTimeout: y.s.opts.SyncWait + 10*time.Second, MaxFrameSize: y.s.opts.MaxFrameSize + 1<<20}
	y.s.kit.Client(&to) // a slave proves its group to its master
	c, err := transport.New(to, y.s.lg)
	if err != nil {
		y.lg.Error("cannot make the copy's client", zap.Error(err))
		return
	}
	y.client = c
	y.ctx, y.cancel = context.WithCancel(context.Background())
	y.running = true
	y.wg.Add(1)
	go y.replicaLoop()
}

// stop ends replicaLoop and waits for it: no request leaves after it; the
// copy stays open.
func (y *slave) stop() {
	y.mu.Lock()
	defer y.mu.Unlock()
	if !y.running {
		return
	}
	y.running = false
	y.cancel()
	y.wg.Wait()
	y.client.Close()
}

// close stops copying and closes the copy.
func (y *slave) close() error {
	y.stop()
	return y.replica.Close()
}

// replicaLoop copies until stopped, backing off 50 ms → 1 s after a
// failure.
func (y *slave) replicaLoop() {
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
		y.errors.Add(1)
		y.s.copyWatch.Failed(err)
		if errors.Is(err, errNoMaster) {
			backoff = failover.NoMasterRetry // the meta servers name one within a heartbeat
			continue
		}
		if err.Error() != lastErr {
			lastErr = err.Error()
			level := zap.WarnLevel
			if errors.Is(err, store.ErrReplicaMismatch) || errors.Is(err, protocol.ErrInvalid) {
				level = zap.ErrorLevel
			}
			y.lg.Log(level, "sync failed; retrying", zap.Error(err))
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
	}
}

// errNoMaster: neither Options.Master nor the meta servers name a master.
var errNoMaster = errors.New("no master known yet: the meta servers name none")

// master returns the address to copy from: Options.Master, or the group's
// live master as the meta servers last named it.
func (y *slave) master() string { return y.s.following() }

// follow copies from the master until an error: it asks for the hours
// changed since the version its copy holds (a full list first), copies the
// missing bytes of each file, commits, and acknowledges with the next
// manifest request.
func (y *slave) follow() error {
	addr := y.master()
	if addr == "" {
		return errNoMaster
	}
	if prev := y.following.Load(); prev == nil || *prev != addr {
		y.following.Store(&addr)
		y.lg.Info("following master", zap.String("addr", addr))
	}
	var run, since uint64
	var stamp uint64 // the lease stamp of the master's latest answer (pkg/failover)
	id := y.s.opts.BrokerID
	if id == "" {
		id = y.s.advertised()
	}
	for {
		// Acknowledge only what this run committed: after a restart the
		// copy's files may have been cut, so what it holds is known again
		// once a manifest has been applied.
		acked := int64(-1)
		if y.applied.Load() {
			acked = y.replica.Replayed()
		}
		q := protocol.DelayManifestRequest{Epoch: y.s.masterEpoch(), Group: y.s.opts.Group, Run: run, Since: since, Acked: acked,
			WaitMillis: uint32(y.s.opts.syncWait() / time.Millisecond), LeaseStamp: stamp, SlaveID: id}
		y.polling.Store(since != 0)
		body, err := y.call(addr, protocol.CmdDelaySyncManifest, protocol.AppendDelayManifestRequest(nil, &q), y.s.opts.SyncWait+10*time.Second)
		y.polling.Store(false)
		if err != nil {
			return err
		}
		y.caughtUpAt.Store(time.Now().UnixNano())
		p, err := protocol.DecodeDelayManifestResponse(body)
		if err != nil {
			return err
		}
		stamp = p.LeaseStamp
		if e := y.s.masterEpoch(); p.Epoch < e {
			return fmt.Errorf("%w: %s serves epoch %d, the group is at %d", protocol.ErrStaleEpoch, addr, p.Epoch, e)
		}
		if id, ok := y.replica.Following(); !ok || id != p.Store {
			// A copy of another store: keep what it shares with this one
			// when this one was promoted from it (a deposed master
			// rejoining), else drop it.
			dropped := false
			kept, err := y.rejoin(addr, p.Store)
			if err == nil && !kept {
				dropped, err = y.replica.Follow(p.Store)
			}
			if err != nil {
				return err
			}
			if kept {
				dropped = true // start over with a full manifest
			}
			y.synced.Store(false)
			y.applied.Store(false)
			if dropped || p.Flags&protocol.DelayManifestFull == 0 {
				run, since = 0, 0
				continue
			}
		}
		if err := y.apply(addr, &p); err != nil {
			if errors.Is(err, protocol.ErrBadRequest) {
				// The master found no record where the copy ends: it lost
				// bytes the copy holds (a machine crash under async flush).
				y.lg.Error("the copy does not line up with the master's files; copying again from empty", zap.Error(err))
				y.applied.Store(false)
				y.synced.Store(false)
				if derr := y.replica.Drop(); derr != nil {
					return errors.Join(err, derr)
				}
			}
			return err
		}
		run, since = p.Run, p.Version
		y.synced.Store(true)
		y.applied.Store(true)
	}
}

// rejoin asks the master where its store came from and, when it was
// promoted from this copy's store, keeps what the two share.
func (y *slave) rejoin(addr string, id uint64) (bool, error) {
	q := protocol.DelayOriginRequest{Epoch: y.s.masterEpoch(), Group: y.s.opts.Group}
	body, err := y.call(addr, protocol.CmdDelaySyncOrigin, protocol.AppendDelayOriginRequest(nil, &q), 10*time.Second)
	if errors.Is(err, protocol.ErrUnknownCommand) {
		return false, nil // a master that cannot say: copy from empty
	}
	if err != nil {
		return false, err
	}
	o, err := protocol.DecodeDelayOrigin(body)
	if err != nil || o.Store != id {
		return false, err
	}
	origin := store.Origin{Parent: o.Parent, Hours: make([]store.HourFiles, len(o.Hours))}
	for i, h := range o.Hours {
		origin.Hours[i] = store.HourFiles{Hour: h.Hour, ScheduleSize: h.ScheduleSize, DispatchSize: h.DispatchSize}
	}
	return y.replica.Rejoin(id, origin)
}

// call sends one request to the master and waits for its answer, telling
// the role loop (the server's copyWatch) when it asked and heard.
func (y *slave) call(addr string, cmd protocol.Command, body []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(y.ctx, timeout)
	defer cancel()
	y.s.copyWatch.Asking()
	resp, err := y.client.Call(ctx, addr, cmd, body)
	if err == nil {
		y.s.copyWatch.Heard()
	}
	return resp, err
}

// apply copies what a manifest lists and the copy lacks, then commits.
func (y *slave) apply(addr string, p *protocol.DelayManifestResponse) error {
	listed := make(map[int64]bool, len(p.Hours))
	var ranges []protocol.DelayRange
	missing := int64(0)
	for _, h := range p.Hours {
		listed[h.Hour] = true
		if h.Flags&protocol.DelayHourRemoved != 0 {
			if err := y.replica.RemoveHour(h.Hour); err != nil {
				return err
			}
			continue
		}
		have := y.replica.Hour(h.Hour)
		if h.ScheduleSize > have.ScheduleSize {
			ranges = append(ranges, protocol.DelayRange{Hour: h.Hour, File: protocol.DelayScheduleFile, From: have.ScheduleSize, To: h.ScheduleSize})
			missing += h.ScheduleSize - have.ScheduleSize
		}
		if h.DispatchSize > have.DispatchSize {
			ranges = append(ranges, protocol.DelayRange{Hour: h.Hour, File: protocol.DelayDispatchFile, From: have.DispatchSize, To: h.DispatchSize})
			missing += h.DispatchSize - have.DispatchSize
		}
	}
	if p.Flags&protocol.DelayManifestFull != 0 {
		for _, hf := range y.replica.HourFiles() {
			if !listed[hf.Hour] {
				if err := y.replica.RemoveHour(hf.Hour); err != nil {
					return err
				}
			}
		}
	}
	y.lagBytes.Store(missing)
	for len(ranges) > 0 {
		batch := ranges[:min(len(ranges), maxReadRanges)]
		q := protocol.DelayReadRequest{Epoch: y.s.masterEpoch(), Group: y.s.opts.Group, MaxBytes: uint32(y.s.opts.SyncMaxBytes), Ranges: batch}
		body, err := y.call(addr, protocol.CmdDelaySyncRead, protocol.AppendDelayReadRequest(nil, &q), 30*time.Second)
		if err != nil {
			return err
		}
		rp, err := protocol.DecodeDelayReadResponse(body)
		if err != nil {
			return err
		}
		for _, c := range rp.Chunks {
			if c.File == protocol.DelayScheduleFile {
				err = y.replica.WriteSchedule(c.Hour, c.Offset, c.Data)
			} else {
				err = y.replica.WriteDispatch(c.Hour, c.Offset, c.Data)
			}
			if err != nil {
				return err
			}
		}
		// What is still missing, from where the copy ends now.
		rest, left := ranges[:0], int64(0)
		for _, g := range ranges {
			have := y.replica.Hour(g.Hour)
			at := have.ScheduleSize
			if g.File == protocol.DelayDispatchFile {
				at = have.DispatchSize
			}
			if at < g.To {
				g.From = at
				rest = append(rest, g)
				left += g.To - at
			}
		}
		progress := left < missing
		missing = left
		y.lagBytes.Store(missing)
		ranges = rest
		if !progress && len(ranges) > 0 {
			// The master has no more of these for now (an hour removed
			// meanwhile, a dispatch file whose tail it has not validated,
			// dispatch entries for records the copy does not hold yet):
			// schedule bytes must come, dispatch entries may come later.
			for _, g := range ranges {
				if g.File == protocol.DelayScheduleFile {
					return fmt.Errorf("%w: master %s sent nothing of schedule %d [%d, %d)", store.ErrReplicaMismatch, addr, g.Hour, g.From, g.To)
				}
			}
			break
		}
	}
	if err := y.replica.Commit(p.Replayed); err != nil {
		return err
	}
	y.lagBytes.Store(0)
	return nil
}

// lag returns how far the copy is behind: bytes of the latest manifest not
// copied yet, and the time since the copy last held everything the master
// had (0 while it waits on the master's next change: the master answers at
// once when there is one).
func (y *slave) lag() (int64, time.Duration) {
	if y.polling.Load() {
		return y.lagBytes.Load(), 0
	}
	return y.lagBytes.Load(), time.Since(time.Unix(0, y.caughtUpAt.Load()))
}
