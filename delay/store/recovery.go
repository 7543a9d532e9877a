package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// recover brings the files back to a consistent state before the goroutines
// start (see "Recovery" in the package documentation).
func (s *Store) recover() error {
	walPath := filepath.Join(s.dir, walDir)
	ckpt, found, err := readCheckpoint(filepath.Join(s.dir, checkpointFile))
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			return err
		}
		s.lg.Warn("checkpoint is corrupt; rebuilding from the files", zap.Error(err))
	}
	segs, err := listSegments(walPath)
	if err != nil {
		return err
	}
	start := ckpt.walOffset
	if !found {
		start = 0
		if len(segs) > 0 {
			start = segs[0]
		}
	}

	// 1. The message log: find where its valid records end, from the replay
	// position on, and which hours they go to.
	touched := make(map[int64]struct{})
	r := newWALReader(walPath, start, maxRecordSize)
	records, lastBase := 0, int64(-1)
	for {
		rec, ok, err := r.next(-1)
		if err != nil {
			if !errors.Is(err, errTorn) {
				r.close()
				return err
			}
			s.lg.Info("cut torn message-log tail", zap.Int64("offset", r.pos), zap.Error(err))
			break
		}
		if !ok {
			break
		}
		if len(rec.message) < 24 {
			s.lg.Warn("cut short message-log record", zap.Int64("offset", rec.offset))
			r.pos = rec.offset
			break
		}
		msg := rec.message
		if isControl(msg) {
			msg = controlMessage(msg)
		}
		if len(msg) >= 24 {
			touched[scheduleHour(dueOf(msg), rec.appendMillis)] = struct{}{}
		}
		records++
		lastBase = r.base
	}
	validEnd := r.pos
	r.close()
	if err := s.recoverWAL(segs, start, validEnd, records, lastBase); err != nil {
		return err
	}

	// 2. Schedule files.
	switch {
	case found:
		err = s.recoverSchedules(ckpt)
	case len(segs) == 0 || segs[0] == 0:
		// The message log is whole: rebuild every schedule file from it. The
		// replay is deterministic, so dispatch logs stay valid.
		err = s.removeSchedules()
	default:
		s.lg.Warn("no usable checkpoint and the message log was trimmed; scanning every schedule file")
		err = s.scanSchedules()
	}
	if err != nil {
		return err
	}

	// 3. Dispatch logs: counts for known hours; files of hours that neither
	// exist nor will be rebuilt by the replay are left over from retention.
	ents, err := os.ReadDir(filepath.Join(s.dir, dispatchDir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		h, ok := parseHourName(e.Name())
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if st := s.hours[h]; st != nil {
			st.dispatched = info.Size() / dispatchEntrySize
			continue
		}
		if _, ok := touched[h]; ok {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, dispatchDir, e.Name())); err != nil {
			return err
		}
	}

	for h := range s.hours {
		s.unloaded = append(s.unloaded, h)
	}
	sort.Slice(s.unloaded, func(i, j int) bool { return s.unloaded[i] < s.unloaded[j] })
	s.replayPos, s.ckptWAL = start, start
	s.changes.log.replayed = start
	s.recoveredEnd = validEnd
	s.caughtUp = start >= validEnd
	s.written.Store(validEnd)
	s.durable.Store(validEnd)
	s.reader = newWALReader(walPath, start, maxRecordSize)
	s.lg.Info("recovered",
		zap.Bool("checkpoint", found), zap.Int64("replay_from", start), zap.Int64("wal_end", validEnd),
		zap.Int("records_to_replay", records), zap.Int("hours", len(s.hours)))
	return nil
}

// recoverWAL removes segments past the valid end and positions the writer
// at it, with every byte after it zero.
func (s *Store) recoverWAL(segs []int64, start, validEnd int64, records int, lastBase int64) error {
	dir := filepath.Join(s.dir, walDir)
	// Continue in the segment of the last valid record or, when there is
	// none past the replay position, in a segment that starts there. Every
	// later segment holds only bytes that were never acknowledged.
	base := lastBase
	if records == 0 {
		base = start
	}
	for _, b := range segs {
		if b > base {
			s.lg.Info("remove message-log segment past the valid end", zap.Int64("base", b))
			if err := os.Remove(filepath.Join(dir, segmentName(b))); err != nil {
				return err
			}
		}
	}
	w := &s.wal
	w.dir, w.segSize = dir, s.opts.SegmentSize
	f, err := os.OpenFile(filepath.Join(dir, segmentName(base)), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		f, w.alloc, err = createSegment(dir, base, s.opts.SegmentSize, 0)
		if err != nil {
			return err
		}
		w.f, w.base, w.pos = f, base, 0
		return fsutil.SyncDir(dir)
	}
	if err != nil {
		return err
	}
	pos := validEnd - base
	alloc := s.opts.SegmentSize
	if pos > alloc {
		alloc = pos
	}
	if err := f.Truncate(pos); err != nil {
		f.Close()
		return err
	}
	if err := preallocate(f, alloc); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	w.f, w.base, w.pos, w.alloc = f, base, pos, alloc
	return fsutil.SyncDir(dir)
}

// recoverSchedules cuts every schedule file back to its checkpointed size;
// files the checkpoint does not know were created after it and are rebuilt.
func (s *Store) recoverSchedules(ckpt checkpoint) error {
	dir := filepath.Join(s.dir, scheduleDir)
	known := make(map[int64]hourCheckpoint, len(ckpt.hours))
	for _, hc := range ckpt.hours {
		known[hc.hour] = hc
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		h, ok := parseHourName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		hc, ok := known[h]
		if !ok {
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		delete(known, h)
		info, err := e.Info()
		if err != nil {
			return err
		}
		st := &hourState{size: hc.size, records: hc.records, lastWAL: -1, loadedTo: notLoaded}
		switch {
		case info.Size() > hc.size:
			s.lg.Info("cut schedule file back to its checkpoint", zap.String("hour", e.Name()),
				zap.Int64("size", info.Size()), zap.Int64("checkpoint_size", hc.size))
			if err := os.Truncate(path, hc.size); err != nil {
				return err
			}
		case info.Size() < hc.size:
			// Bytes that were fsynced before the checkpoint are gone: keep
			// what is still valid and say what was lost.
			scan, err := scanFile(path, maxRecordSize)
			if err != nil {
				return err
			}
			s.lg.Error("schedule file is shorter than its checkpoint; messages lost",
				zap.String("hour", e.Name()), zap.Int64("size", info.Size()), zap.Int64("checkpoint_size", hc.size),
				zap.Int64("lost", hc.records-scan.records))
			if err := os.Truncate(path, scan.end); err != nil {
				return err
			}
			st.size, st.records = scan.end, scan.records
		}
		s.hours[h] = st
	}
	for h, hc := range known {
		s.lg.Error("schedule file missing; messages lost", zap.String("hour", hourName(h)), zap.Int64("lost", hc.records))
	}
	return nil
}

// removeSchedules deletes every schedule file.
func (s *Store) removeSchedules() error {
	dir := filepath.Join(s.dir, scheduleDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if _, ok := parseHourName(e.Name()); ok {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanSchedules rebuilds the hour states by reading every schedule file,
// cutting torn tails. The replay then skips records a file already holds.
func (s *Store) scanSchedules() error {
	dir := filepath.Join(s.dir, scheduleDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		h, ok := parseHourName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		scan, err := scanFile(path, maxRecordSize)
		if err != nil {
			return err
		}
		if scan.err != nil {
			s.lg.Warn("cut schedule file at its first invalid record", zap.String("hour", e.Name()), zap.Error(scan.err))
			if err := os.Truncate(path, scan.end); err != nil {
				return err
			}
		}
		s.hours[h] = &hourState{size: scan.end, records: scan.records, lastWAL: scan.lastWAL, loadedTo: notLoaded}
	}
	return nil
}

// scanFile scans a whole schedule file; an I/O error is returned, a torn
// record is reported in the result.
func scanFile(path string, maxSize int64) (scheduleScan, error) {
	f, err := os.Open(path)
	if err != nil {
		return scheduleScan{}, err
	}
	defer f.Close()
	res := scanSchedule(f, -1, maxSize, nil)
	if res.err != nil && !errors.Is(res.err, errTorn) {
		return res, fmt.Errorf("scan %s: %w", path, res.err)
	}
	return res, nil
}
