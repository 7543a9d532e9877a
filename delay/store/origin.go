package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Origin file "origin", written atomically when a replica's copy is
// promoted to a master's store, big-endian:
//
//	0          4      5          8              16          20
//	+----------+------+----------+--------------+-----------+
//	| magic    | ver  | reserved | parent u64   | count u32 |
//	| "QDOR"   | u8=1 |  3 × 0   |              |           |
//	+----------+------+----------+--------------+-----------+
//	count × +-----------+--------------------+--------------------+
//	        | hour i64  | schedule size i64  | dispatch size i64  |
//	        +-----------+--------------------+--------------------+
//	crc u32: CRC-32C of everything before it
//
// parent is the ID of the store the copy followed; each hour's sizes are
// the copy's when it was promoted: those bytes of each file are the
// parent's, the same in both stores. A deposed master (the parent) that
// rejoins as the slave keeps that much of each of its files and drops the
// rest (Replica.Rejoin).
const (
	originFile    = "origin"
	originMagic   = 0x51444f52 // "QDOR"
	originVersion = 1
	originHead    = 20
	originEntry   = 24
)

// Origin is where a store came from: the store it was copied from and the
// hour sizes the two share. Parent 0: the store was created empty.
type Origin struct {
	Parent uint64
	Hours  []HourFiles // ascending; Records and Removed unused
}

func (o *Origin) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, originMagic)
	b = append(b, originVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, o.Parent)
	b = binary.BigEndian.AppendUint32(b, uint32(len(o.Hours)))
	for _, h := range o.Hours {
		b = binary.BigEndian.AppendUint64(b, uint64(h.Hour))
		b = binary.BigEndian.AppendUint64(b, uint64(h.ScheduleSize))
		b = binary.BigEndian.AppendUint64(b, uint64(h.DispatchSize))
	}
	return binary.BigEndian.AppendUint32(b, protocol.Checksum(b))
}

func decodeOrigin(b []byte) (Origin, error) {
	var o Origin
	if len(b) < originHead+4 || protocol.Checksum(b[:len(b)-4]) != binary.BigEndian.Uint32(b[len(b)-4:]) ||
		binary.BigEndian.Uint32(b) != originMagic || b[4] != originVersion {
		return o, fmt.Errorf("%w: origin file", ErrCorrupt)
	}
	o.Parent = binary.BigEndian.Uint64(b[8:16])
	n := int(binary.BigEndian.Uint32(b[16:20]))
	if len(b) != originHead+n*originEntry+4 {
		return o, fmt.Errorf("%w: origin file holds %d bytes for %d hours", ErrCorrupt, len(b), n)
	}
	o.Hours = make([]HourFiles, n)
	for i := range o.Hours {
		e := b[originHead+i*originEntry:]
		o.Hours[i] = HourFiles{Hour: int64(binary.BigEndian.Uint64(e)), ScheduleSize: int64(binary.BigEndian.Uint64(e[8:])),
			DispatchSize: int64(binary.BigEndian.Uint64(e[16:]))}
	}
	return o, nil
}

// readOrigin returns the origin in dir (Parent 0 when there is none; a
// corrupt file counts as none, so a rejoining parent copies everything).
func readOrigin(dir string, lg *zap.Logger) (Origin, error) {
	b, err := os.ReadFile(filepath.Join(dir, originFile))
	if errors.Is(err, os.ErrNotExist) {
		return Origin{}, nil
	}
	if err != nil {
		return Origin{}, err
	}
	o, err := decodeOrigin(b)
	if err != nil {
		lg.Warn("origin file unreadable; the store's parent will copy it from empty if it rejoins", zap.Error(err))
		return Origin{}, nil
	}
	return o, nil
}

// Origin returns where the store came from (Parent 0: created empty).
func (s *Store) Origin() Origin { return s.origin }

// Rejoin turns the directory of the store with ID parent (a deposed
// master) — or a copy of it — into a copy of its child store (the store
// promoted from parent's copy, with origin o): of each hour file it keeps
// the bytes the two share (o's sizes) and drops the rest, hours o does not
// list included. It reports false, changing nothing, when this directory is
// neither o's parent nor a copy of it; the caller then uses Follow, which
// drops everything.
func (r *Replica) Rejoin(store uint64, o Origin) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, ErrClosed
	}
	if o.Parent == 0 || !(r.master && r.ownID == o.Parent || r.marked && r.following == o.Parent) {
		return false, nil
	}
	shared := make(map[int64]HourFiles, len(o.Hours))
	for _, h := range o.Hours {
		shared[h.Hour] = h
	}
	r.schedules.closeAll()
	r.dispatch.closeAll()
	kept, dropped := 0, 0
	for h, st := range r.hours {
		sh, ok := shared[h]
		if !ok {
			for _, d := range []string{scheduleDir, dispatchDir} {
				if err := os.Remove(filepath.Join(r.dir, d, hourName(h))); err != nil && !errors.Is(err, os.ErrNotExist) {
					return false, err
				}
			}
			delete(r.hours, h)
			dropped++
			continue
		}
		if st.scheduleSize > sh.ScheduleSize {
			path := filepath.Join(r.dir, scheduleDir, hourName(h))
			if err := os.Truncate(path, sh.ScheduleSize); err != nil {
				return false, err
			}
			scan, err := scanFile(path, maxRecordSize)
			if err != nil {
				return false, err
			}
			if scan.err != nil || scan.end != sh.ScheduleSize {
				return false, fmt.Errorf("%w: %s cut at the shared size %d holds whole records up to %d", ErrReplicaMismatch, hourName(h), sh.ScheduleSize, scan.end)
			}
			st.scheduleSize, st.records = scan.end, scan.records
		}
		if st.dispatchSize > sh.DispatchSize {
			if err := os.Truncate(filepath.Join(r.dir, dispatchDir, hourName(h)), sh.DispatchSize); err != nil {
				return false, err
			}
			st.dispatchSize = sh.DispatchSize
		}
		kept++
	}
	for _, p := range []string{logDir, legacyLogDir} {
		if err := os.RemoveAll(filepath.Join(r.dir, p)); err != nil {
			return false, err
		}
	}
	for _, f := range []string{checkpointFile, idFile, originFile} {
		if err := os.Remove(filepath.Join(r.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	for _, d := range []string{r.dir, filepath.Join(r.dir, scheduleDir), filepath.Join(r.dir, dispatchDir)} {
		if err := fsutil.SyncDir(d); err != nil {
			return false, err
		}
	}
	if err := fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(r.dir, replicaFile), encodeReplicaMarker(store)); err != nil {
		return false, err
	}
	r.following, r.marked, r.master, r.ownID = store, true, false, 0
	r.lg.Info("rejoined: kept what this directory shares with the new master's store",
		zap.Uint64("store", store), zap.Int("hours_kept", kept), zap.Int("hours_dropped", dropped))
	return true, nil
}

// writeOriginLocked records the copy's origin before it is promoted.
func (r *Replica) writeOriginLocked() error {
	o := Origin{Parent: r.following, Hours: make([]HourFiles, 0, len(r.hours))}
	for h, st := range r.hours {
		o.Hours = append(o.Hours, HourFiles{Hour: h, ScheduleSize: st.scheduleSize, DispatchSize: st.dispatchSize})
	}
	sort.Slice(o.Hours, func(i, j int) bool { return o.Hours[i].Hour < o.Hours[j].Hour })
	return fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(r.dir, originFile), o.encode())
}

// readID returns the store ID in dir, 0 when there is none or it is
// unreadable (without creating one, as loadID does).
func readID(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, idFile))
	if err != nil || len(b) != 12 || protocol.Checksum(b[:8]) != binary.BigEndian.Uint32(b[8:]) {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
