package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Checkpoint file "checkpoint", big-endian, replaced atomically (temporary
// file, fsync, rename, fsync of the directory):
//
//	0          4      5           8                16          20
//	+----------+------+-----------+----------------+-----------+
//	| magic    | ver  | reserved  | wal offset u64 | count u32 |
//	| "QDCP"   | u8=1 |  3 × 0    |                |           |
//	+----------+------+-----------+----------------+-----------+
//	count × +-------------+-------------+----------------+
//	        |  hour i64   |  size u64   |  records u64   |
//	        +-------------+-------------+----------------+
//	crc u32: CRC-32C of everything before it
//
// wal offset is how far the message log has been replayed into schedule
// files; for every hour that has a schedule file, size and records describe
// the file at that point, and every byte below size has been fsynced. On
// open, each schedule file is cut back to its checkpointed size and the
// message log is replayed again from wal offset, which rewrites the cut
// records at the same offsets (the replay is deterministic), so dispatch
// entries pointing at them stay right.
const (
	checkpointFile    = "checkpoint"
	checkpointMagic   = 0x51444350 // "QDCP"
	checkpointVersion = 1
	checkpointHead    = 20
	checkpointEntry   = 24
)

type hourCheckpoint struct {
	hour    int64
	size    int64
	records int64
}

type checkpoint struct {
	walOffset int64
	hours     []hourCheckpoint // ascending by hour
}

func (c *checkpoint) encode() []byte {
	b := make([]byte, 0, checkpointHead+checkpointEntry*len(c.hours)+4)
	b = binary.BigEndian.AppendUint32(b, checkpointMagic)
	b = append(b, checkpointVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(c.walOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.hours)))
	for _, h := range c.hours {
		b = binary.BigEndian.AppendUint64(b, uint64(h.hour))
		b = binary.BigEndian.AppendUint64(b, uint64(h.size))
		b = binary.BigEndian.AppendUint64(b, uint64(h.records))
	}
	return binary.BigEndian.AppendUint32(b, protocol.Checksum(b))
}

func decodeCheckpoint(b []byte) (checkpoint, error) {
	var c checkpoint
	if len(b) < checkpointHead+4 {
		return c, fmt.Errorf("%w: checkpoint of %d bytes", ErrCorrupt, len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if protocol.Checksum(body) != sum {
		return c, fmt.Errorf("%w: checkpoint checksum", ErrCorrupt)
	}
	if binary.BigEndian.Uint32(b) != checkpointMagic || b[4] != checkpointVersion {
		return c, fmt.Errorf("%w: checkpoint magic or version", ErrCorrupt)
	}
	c.walOffset = int64(binary.BigEndian.Uint64(b[8:16]))
	n := int(binary.BigEndian.Uint32(b[16:20]))
	if len(body) != checkpointHead+n*checkpointEntry {
		return c, fmt.Errorf("%w: checkpoint holds %d bytes for %d hours", ErrCorrupt, len(body), n)
	}
	c.hours = make([]hourCheckpoint, n)
	for i := range c.hours {
		e := body[checkpointHead+i*checkpointEntry:]
		c.hours[i] = hourCheckpoint{
			hour:    int64(binary.BigEndian.Uint64(e)),
			size:    int64(binary.BigEndian.Uint64(e[8:])),
			records: int64(binary.BigEndian.Uint64(e[16:])),
		}
	}
	if c.walOffset < 0 || !sort.SliceIsSorted(c.hours, func(i, j int) bool { return c.hours[i].hour < c.hours[j].hour }) {
		return c, fmt.Errorf("%w: checkpoint fields out of range", ErrCorrupt)
	}
	return c, nil
}

// readCheckpoint returns the checkpoint at path; found is false when there
// is none.
func readCheckpoint(path string) (c checkpoint, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	c, err = decodeCheckpoint(b)
	return c, err == nil, err
}

// checkpoint fsyncs the schedule files written since the last one and the
// dispatch logs, then records the replay position and hour sizes. It skips
// the write when nothing changed, unless force.
func (s *Store) checkpoint(force bool) error {
	if err := s.syncSchedules(); err != nil {
		return err
	}
	if err := s.dispatch.syncDirty(); err != nil {
		if s.cancelsDirty {
			// Cancel entries live only in the dispatch logs once the
			// message log is trimmed past their records.
			return fmt.Errorf("sync dispatch logs holding cancels: %w", err)
		}
		s.lg.Error("sync dispatch logs failed", zap.Error(err))
	} else {
		s.cancelsDirty = false
	}
	if !s.ckptDirty && !force && len(s.dirtyHours) == 0 {
		return nil
	}
	c := checkpoint{walOffset: s.replayPos, hours: make([]hourCheckpoint, 0, len(s.hours))}
	for h, st := range s.hours {
		c.hours = append(c.hours, hourCheckpoint{hour: h, size: st.size, records: st.records})
	}
	sort.Slice(c.hours, func(i, j int) bool { return c.hours[i].hour < c.hours[j].hour })
	if err := fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(s.dir, checkpointFile), c.encode()); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	clear(s.dirtyHours)
	s.ckptDirty = false
	if s.replayPos != s.ckptWAL {
		s.ckptWAL = s.replayPos
		s.trimWAL(s.replayPos)
	}
	return nil
}

// syncWorkers is how many fdatasyncs of schedule files a checkpoint runs at
// once: with messages spread over hundreds of hours, each checkpoint syncs
// hundreds of files, and the file system commits concurrent syncs together
// (721 files: about 130 ms one by one, 40 ms sixteen at a time, here).
const syncWorkers = 16

// syncSchedules fdatasyncs the schedule files written since the last
// checkpoint.
func (s *Store) syncSchedules() error {
	hours := make(chan int64)
	errs := make(chan error, syncWorkers)
	var wg sync.WaitGroup
	for i := 0; i < min(syncWorkers, len(s.dirtyHours)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for h := range hours {
				if first != nil {
					continue
				}
				cf, err := s.schedules.acquire(h, false)
				if err != nil {
					first = err
					continue
				}
				if err := cf.File.Sync(); err != nil {
					first = fmt.Errorf("sync schedule file %s: %w", hourName(h), err)
				}
				s.schedules.release(cf)
			}
			errs <- first
		}()
	}
	for h := range s.dirtyHours {
		hours <- h
	}
	close(hours)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// trimWAL deletes message-log segments that lie wholly before pos.
func (s *Store) trimWAL(pos int64) {
	if _, err := s.log.DeleteBefore(pos); err != nil {
		s.lg.Warn("trim message log", zap.Int64("before", pos), zap.Error(err))
	}
}
