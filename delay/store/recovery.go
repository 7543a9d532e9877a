package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/segment"
)

// recover brings the files back to a consistent state before the goroutines
// start (see "Recovery" in the package documentation).
func (s *Store) recover() error {
	ckpt, found, err := readCheckpoint(filepath.Join(s.dir, checkpointFile))
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			return err
		}
		s.lg.Warn("checkpoint is corrupt; rebuilding from the files", zap.Error(err))
	}
	if err := convertLegacyLog(s.dir, s.opts, ckpt.walOffset, found, s.lg); err != nil {
		return err
	}
	if s.log, err = openMessageLog(s.dir, s.opts, s.opts.FS); err != nil {
		return err
	}
	s.batch = s.log.NewBatch()
	segs := s.log.Segments()
	start := ckpt.walOffset
	if !found {
		start = s.log.Start()
	}
	if err := s.checkSegments(segs, start); err != nil {
		return err
	}

	// 1. The message log: find where its valid records end, from the replay
	// position on, and which hours they go to. pkg/segment cuts a torn
	// tail and refuses damage in the middle of the log.
	touched := make(map[int64]struct{})
	records := 0
	validEnd := start
	if len(segs) == 0 {
		s.log.SetEnd(start)
	} else {
		res, err := s.log.Recover(start, false, func(off int64, kind uint8, payload []byte) error {
			rec, err := parseLogRecord(off, kind, payload)
			if err != nil {
				return err
			}
			msg := rec.message
			if isControl(msg) {
				msg = controlMessage(msg)
			}
			if len(msg) >= 24 {
				touched[scheduleHour(dueOf(msg), rec.appendMillis)] = struct{}{}
			}
			records++
			return nil
		})
		if errors.Is(err, segment.ErrCorrupt) {
			return fmt.Errorf("%w: message log: %w", ErrCorrupt, err)
		}
		if err != nil {
			return fmt.Errorf("message log: %w", err)
		}
		if res.TornAt >= 0 {
			s.lg.Info("cut torn message-log tail", zap.Int64("offset", res.TornAt))
		}
		validEnd = res.End
	}

	// 2. Schedule files.
	switch {
	case found:
		err = s.recoverSchedules(ckpt)
	case s.log.Start() == 0:
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
	s.reader = s.log.NewReader(start)
	s.lg.Info("recovered",
		zap.Bool("checkpoint", found), zap.Int64("replay_from", start), zap.Int64("log_end", validEnd),
		zap.Int("records_to_replay", records), zap.Int("hours", len(s.hours)))
	return nil
}

// checkSegments refuses a message log that lacks segments the replay needs:
// one holding the replay position, or one between two that are there (a
// segment's file is preallocated to reach the next segment's base).
// pkg/segment would read either gap as the zero rest of a segment.
func (s *Store) checkSegments(segs []segment.SegmentInfo, start int64) error {
	if len(segs) == 0 {
		return nil
	}
	if start < segs[0].Base {
		return fmt.Errorf("%w: message log starts at %d, the replay at %d: segments are missing", ErrCorrupt, segs[0].Base, start)
	}
	for i := 0; i+1 < len(segs); i++ {
		if segs[i+1].Base <= start {
			continue
		}
		info, err := os.Stat(filepath.Join(s.dir, logDir, segment.FileName(segs[i].Base)))
		if err != nil {
			return err
		}
		if info.Size() < segs[i].Size {
			return fmt.Errorf("%w: message-log segment %d is %d bytes and the next starts at %d: a segment is missing",
				ErrCorrupt, segs[i].Base, info.Size(), segs[i+1].Base)
		}
	}
	return nil
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
