package store

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/qmq-go/qmq/pkg/segment"
)

// Action log: a segment.Log whose record kind is the action type and whose
// payload starts with the same fields for every action (big-endian):
//
//	flags u8 | subject len u8 | subject | group len u8 | group |
//	consumer len u8 | consumer | version u64 | action fields
//
// flags bit0 marks a broadcast subscription (group is then the consumer id).
// version is the group's action counter after this action: replay applies
// an action only if its version is above the group's (from the checkpoint),
// so replaying an action the checkpoint already holds changes nothing.
//
//	actCreate   cursor i64                              a group starts at cursor
//	actPull     first pull seq i64 | returned taken u32 | cursor i64 |
//	            run count u32 | runs × (consume seq i64 | count u32)
//	            the consumer got pull seqs first.. mapped to the runs; taken
//	            entries left the returned queue; the group cursor moved to cursor
//	            (the runs name at most MaxPull entries: one pull's)
//	actAck      acked i64                               acked through this pull seq
//	actVoid     next i64                                pull seqs up to next-1 void
//	actReturn   acked i64 | run count u32 | runs       un-acked entries handed back
//	            (at most returnChunk entries)
//	actReset    cursor i64                              cursor moved, returned cleared
//	actRemove   (none)                                  consumer forgotten
const (
	actCreate uint8 = 1 + iota
	actPull
	actAck
	actVoid
	actReturn
	actReset
	actRemove
)

// run is a stretch of consecutive consume sequences.
type run struct {
	start int64
	count uint32
}

// action is a decoded action record.
type action struct {
	kind      uint8
	broadcast bool
	subject   string
	group     string
	consumer  string
	version   uint64
	// per kind
	seq      int64 // create/reset: cursor; pull: first pull seq; ack/return: acked; void: next
	cursor   int64 // pull
	taken    uint32
	runs     []run
	runCount int64
}

func appendString8(b []byte, s string) []byte {
	b = append(b, uint8(len(s)))
	return append(b, s...)
}

func encodeActionHead(b []byte, kind uint8, broadcast bool, subject, group, consumer string, version uint64) []byte {
	flags := uint8(0)
	if broadcast {
		flags = 1
	}
	b = append(b, flags)
	b = appendString8(b, subject)
	b = appendString8(b, group)
	b = appendString8(b, consumer)
	return binary.BigEndian.AppendUint64(b, version)
}

func appendRuns(b []byte, runs []run) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(runs)))
	for _, r := range runs {
		b = binary.BigEndian.AppendUint64(b, uint64(r.start))
		b = binary.BigEndian.AppendUint32(b, r.count)
	}
	return b
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: truncated record", ErrCorrupt)
		return false
	}
	return true
}

func (d *decoder) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) string8() string {
	n := int(d.u8())
	if !d.need(n) {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) runs() []run {
	n := d.u32()
	if !d.need(int(n) * 12) {
		return nil
	}
	out := make([]run, n)
	for i := range out {
		out[i] = run{start: int64(d.u64()), count: d.u32()}
	}
	return out
}

func decodeAction(kind uint8, p []byte) (action, error) {
	d := decoder{b: p}
	a := action{kind: kind}
	a.broadcast = d.u8()&1 != 0
	a.subject = d.string8()
	a.group = d.string8()
	a.consumer = d.string8()
	a.version = d.u64()
	switch kind {
	case actCreate, actReset, actAck, actVoid:
		a.seq = int64(d.u64())
	case actPull:
		a.seq = int64(d.u64())
		a.taken = d.u32()
		a.cursor = int64(d.u64())
		a.runs = d.runs()
		a.runCount = runsLen(a.runs)
		if d.err == nil && a.runCount > MaxPull {
			// Replay writes a pull's entries to the pull log one by one:
			// a record naming billions would take that much memory.
			d.err = fmt.Errorf("%w: pull of %d entries, at most %d", ErrCorrupt, a.runCount, MaxPull)
		}
	case actReturn:
		a.seq = int64(d.u64())
		a.runs = d.runs()
		if n := runsLen(a.runs); d.err == nil && n > returnChunk {
			d.err = fmt.Errorf("%w: return of %d entries, at most %d", ErrCorrupt, n, returnChunk)
		}
	case actRemove:
	default:
		return a, fmt.Errorf("%w: unknown action %d", ErrCorrupt, kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes in action %d", ErrCorrupt, len(d.b), kind)
	}
	return a, d.err
}

// actionLog buffers action records in memory and writes them in batches
// (flush). Any goroutine may append; one flush runs at a time.
type actionLog struct {
	log *segment.Log

	mu  sync.Mutex // guards cur and scratch
	cur *segment.Batch

	flushMu sync.Mutex // guards spare and failed
	spare   *segment.Batch
	failed  bool
	// onFlush runs after records were written and synced.
	onFlush func()
}

func newActionLog(l *segment.Log) *actionLog {
	a := &actionLog{log: l, cur: l.NewBatch(), spare: l.NewBatch()}
	return a
}

// append adds a record; the caller holds the group's lock so records of one
// group are appended in version order.
func (a *actionLog) append(kind uint8, payload []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err := a.cur.Append(kind, payload, nil)
	return err
}

// appendAt adds a record and returns its offset (replication).
func (a *actionLog) appendAt(kind uint8, payload []byte) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur.Append(kind, payload, nil)
}

// end returns the offset after every appended action.
func (a *actionLog) end() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur.End()
}

// flush writes and syncs every appended action. After a failure the same
// records are written again at the same offsets on the next flush.
func (a *actionLog) flush() error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	if a.failed {
		if err := a.log.Reset(a.log.Synced()); err != nil {
			return fmt.Errorf("%w: action log: %w", ErrIO, err)
		}
		if err := a.writeSpare(); err != nil {
			return err
		}
	}
	a.mu.Lock()
	if a.cur.Records() == 0 {
		a.mu.Unlock()
		return nil
	}
	a.cur, a.spare = a.spare, a.cur
	a.cur.ResetAfter(a.spare)
	a.mu.Unlock()
	return a.writeSpare()
}

func (a *actionLog) writeSpare() error {
	if err := a.log.Write(a.spare); err != nil {
		a.failed = true
		return fmt.Errorf("%w: action log: %w", ErrIO, err)
	}
	if err := a.log.Sync(); err != nil {
		a.failed = true
		return fmt.Errorf("%w: action log: %w", ErrIO, err)
	}
	a.failed = false
	if a.onFlush != nil {
		a.onFlush()
	}
	return nil
}
