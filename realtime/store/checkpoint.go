package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// Checkpoint file "checkpoint", written with fsutil.WriteFileAtomic
// (temp file, fsync, rename, fsync the directory). Big-endian:
//
//	magic u32 "QCKP" | version u8 | message-log offset i64 | action-log offset i64 |
//	last append time ms i64 |
//	subject count u32 | subjects × (name s8 | next i64 | min i64 | bytes i64) |
//	group count u32 | groups × (flags u8 | subject s8 | group s8 | version u64 |
//	    cursor i64 | returned run count u32 | runs × (start i64 | count u32) |
//	    consumer count u32 | consumers × (id s8 | next i64 | acked i64)) |
//	crc32c u32 over everything before it
//
// A checkpoint promises: every message-log record before the message-log
// offset is indexed in the consume logs, which are synced up to each
// subject's next; every action before the action-log offset is reflected in
// the groups, whose pull logs are synced up to each consumer's next.
// Recovery replays only what follows the two offsets.
const (
	checkpointMagic   uint32 = 0x51434B50
	checkpointVersion uint8  = 1
	checkpointName           = "checkpoint"
)

type ckSubject struct {
	name             string
	next, min, bytes int64
}

type ckConsumer struct {
	id          string
	next, acked int64
}

type ckGroup struct {
	key       groupKey
	version   uint64
	cursor    int64
	returned  []run
	consumers []ckConsumer
}

type checkpoint struct {
	msgOffset, actionOffset int64
	lastTs                  int64 // append times never go below it
	subjects                []ckSubject
	groups                  []ckGroup
}

func (c *checkpoint) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, checkpointMagic)
	b = append(b, checkpointVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(c.msgOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(c.actionOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(c.lastTs))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.subjects)))
	for _, s := range c.subjects {
		b = appendString8(b, s.name)
		b = binary.BigEndian.AppendUint64(b, uint64(s.next))
		b = binary.BigEndian.AppendUint64(b, uint64(s.min))
		b = binary.BigEndian.AppendUint64(b, uint64(s.bytes))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.groups)))
	for _, g := range c.groups {
		flags := uint8(0)
		if g.key.broadcast {
			flags = 1
		}
		b = append(b, flags)
		b = appendString8(b, g.key.subject)
		b = appendString8(b, g.key.group)
		b = binary.BigEndian.AppendUint64(b, g.version)
		b = binary.BigEndian.AppendUint64(b, uint64(g.cursor))
		b = appendRuns(b, g.returned)
		b = binary.BigEndian.AppendUint32(b, uint32(len(g.consumers)))
		for _, c := range g.consumers {
			b = appendString8(b, c.id)
			b = binary.BigEndian.AppendUint64(b, uint64(c.next))
			b = binary.BigEndian.AppendUint64(b, uint64(c.acked))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeCheckpoint(b []byte) (*checkpoint, error) {
	if len(b) < 9 {
		return nil, fmt.Errorf("%w: checkpoint of %d bytes", ErrCorrupt, len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checkpoint crc mismatch", ErrCorrupt)
	}
	d := decoder{b: body}
	if d.u32() != checkpointMagic || d.u8() != checkpointVersion {
		return nil, fmt.Errorf("%w: checkpoint magic or version", ErrCorrupt)
	}
	c := &checkpoint{msgOffset: int64(d.u64()), actionOffset: int64(d.u64()), lastTs: int64(d.u64())}
	for n := d.u32(); n > 0 && d.err == nil; n-- {
		c.subjects = append(c.subjects, ckSubject{name: d.string8(), next: int64(d.u64()), min: int64(d.u64()), bytes: int64(d.u64())})
	}
	for n := d.u32(); n > 0 && d.err == nil; n-- {
		g := ckGroup{}
		g.key.broadcast = d.u8()&1 != 0
		g.key.subject = d.string8()
		g.key.group = d.string8()
		g.version = d.u64()
		g.cursor = int64(d.u64())
		g.returned = d.runs()
		for k := d.u32(); k > 0 && d.err == nil; k-- {
			g.consumers = append(g.consumers, ckConsumer{id: d.string8(), next: int64(d.u64()), acked: int64(d.u64())})
		}
		c.groups = append(c.groups, g)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes in checkpoint", ErrCorrupt, len(d.b))
	}
	return c, d.err
}

// loadCheckpoint reads the checkpoint; a missing one is an empty checkpoint.
// A damaged one is reported and ignored: recovery then replays every log
// from its start.
func (s *Store) loadCheckpoint() *checkpoint {
	b, err := os.ReadFile(filepath.Join(s.dir, checkpointName))
	if errors.Is(err, os.ErrNotExist) {
		return &checkpoint{}
	}
	if err == nil {
		var c *checkpoint
		if c, err = decodeCheckpoint(b); err == nil {
			return c
		}
	}
	s.lg.Error("checkpoint unusable; replaying the logs from their start", zap.Error(err))
	s.stats.badCheckpoints.Add(1)
	return &checkpoint{}
}

// Checkpoint writes a checkpoint so that a restart replays only what follows
// it. It syncs the message log, the consume logs, the action log and the
// pull logs first. Appends, pulls and acks continue meanwhile.
func (s *Store) Checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if s.isClosed() && !s.closing.Load() {
		return ErrClosed
	}
	return s.checkpointLocked()
}

func (s *Store) checkpointLocked() error {
	c := &checkpoint{}
	// Messages: the durable end, and each subject's entries below it.
	c.msgOffset = s.goodEnd.Load()
	c.lastTs = s.lastPublishedTs.Load()
	s.subjectsMu.RLock()
	subjects := make([]*subject, 0, len(s.subjects))
	for _, sj := range s.subjects {
		subjects = append(subjects, sj)
	}
	s.subjectsMu.RUnlock()
	// Sequences visible at msgOffset: visible is published after goodEnd is
	// stored, so read goodEnd first and take visible as it is now; records
	// between msgOffset and the visible end are replayed idempotently.
	var dirtyLogs []dirtyLog
	for _, sj := range subjects {
		sj.mu.Lock()
		err := sj.flushLocked()
		if err == nil && sj.appended == sj.appendedAtCheckpoint {
			sj.release() // idle since the last checkpoint
		}
		sj.appendedAtCheckpoint = sj.appended
		c.subjects = append(c.subjects, ckSubject{name: sj.name, next: sj.visible, min: sj.min, bytes: sj.bytes})
		sj.mu.Unlock()
		if err != nil {
			return err
		}
		if gen, dirty := sj.log.Dirty(); dirty {
			dirtyLogs = append(dirtyLogs, dirtyLog{sj.log, gen})
		}
	}
	// Everything visible above is written; make it durable (FlushAsync).
	if err := s.msgLog.Sync(); err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	// Groups: the action-log end first, then each group's state.
	c.actionOffset = s.actions.end()
	s.groupsMu.RLock()
	groups := make([]*group, 0, len(s.groups))
	for _, g := range s.groups {
		groups = append(groups, g)
	}
	s.groupsMu.RUnlock()
	sort.Slice(groups, func(i, j int) bool { return groups[i].key.subject < groups[j].key.subject })
	for _, g := range groups {
		g.mu.Lock()
		cg := ckGroup{key: g.key, version: g.version, cursor: g.cursor, returned: append([]run(nil), g.returned...)}
		for _, cs := range g.consumers {
			cg.consumers = append(cg.consumers, ckConsumer{id: cs.id, next: cs.next, acked: cs.acked})
			if cs.log == nil {
				continue
			}
			if err := cs.flushPullLog(); err != nil {
				g.mu.Unlock()
				return err
			}
			if gen, dirty := cs.log.Dirty(); dirty {
				dirtyLogs = append(dirtyLogs, dirtyLog{cs.log, gen})
			}
		}
		g.mu.Unlock()
		c.groups = append(c.groups, cg)
	}
	if err := s.syncLogs(dirtyLogs); err != nil {
		return err
	}
	if err := s.actions.flush(); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(s.opts.FS, filepath.Join(s.dir, checkpointName), c.encode()); err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	s.stats.checkpoints.Add(1)
	// Recovery starts at the checkpoint: older action-log segments and
	// pull-log segments wholly at or below each consumer's acked position
	// are no longer read.
	keep := c.actionOffset
	if s.opts.ActionLogFloor != nil {
		if floor := s.opts.ActionLogFloor(); floor >= 0 {
			keep = min(keep, floor)
		}
	}
	if _, err := s.actLog.DeleteBefore(keep); err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	for _, g := range groups {
		g.mu.Lock()
		for _, cs := range g.consumers {
			if cs.log != nil && cs.acked >= 0 {
				if _, err := cs.log.DeleteBefore(min(cs.acked+1, cs.plFlushed)); err != nil {
					g.mu.Unlock()
					return fmt.Errorf("%w: %w", ErrIO, err)
				}
			}
		}
		g.mu.Unlock()
	}
	return nil
}

// syncFSThreshold: with more dirty consume and pull logs than this, a
// checkpoint makes them durable with one syncfs instead of one fsync each.
const syncFSThreshold = 32

type dirtyLog struct {
	log *segment.FixedLog
	gen uint64
}

func (s *Store) syncLogs(logs []dirtyLog) error {
	if len(logs) > syncFSThreshold {
		err := s.opts.FS.SyncFS(s.dir)
		if err == nil {
			for _, l := range logs {
				l.log.MarkSynced(l.gen)
			}
			return nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
		// No syncfs here: fsync each log below.
	}
	for _, l := range logs {
		if err := l.log.Sync(); err != nil {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
	}
	return nil
}
