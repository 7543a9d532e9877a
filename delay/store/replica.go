package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Replica marker file "replica", written atomically; its presence says the
// directory holds a slave's copy (schedule and dispatch files copied from a
// master), not a master's store:
//
//	0          4      5          8            16
//	+----------+------+----------+------------+-----------+
//	| magic    | ver  | reserved | store u64  | crc u32   |
//	| "QDRP"   | u8=1 |  3 × 0   |            |           |
//	+----------+------+----------+------------+-----------+
//
// store is the ID of the master's store the copy follows (Store.ID); crc is
// CRC-32C of the 16 bytes before it.
const (
	replicaFile    = "replica"
	replicaMagic   = 0x51445250 // "QDRP"
	replicaVersion = 1
	replicaSize    = 20
)

func encodeReplicaMarker(store uint64) []byte {
	b := binary.BigEndian.AppendUint32(nil, replicaMagic)
	b = append(b, replicaVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, store)
	return binary.BigEndian.AppendUint32(b, protocol.Checksum(b))
}

func decodeReplicaMarker(b []byte) (uint64, error) {
	if len(b) != replicaSize || protocol.Checksum(b[:16]) != binary.BigEndian.Uint32(b[16:]) ||
		binary.BigEndian.Uint32(b) != replicaMagic || b[4] != replicaVersion {
		return 0, fmt.Errorf("%w: replica marker", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(b[8:16]), nil
}

// ErrNotFollowing: the replica's copy does not belong to the master it was
// asked to copy from (call Follow first).
var ErrNotFollowing = errors.New("delay/store: replica does not follow this master")

// Replica is a slave's copy of a master's store: the master's schedule and
// dispatch files, byte for byte at the same offsets, and nothing else (no
// message log, no wheel, no goroutines). The slave writes what it copied
// with WriteSchedule and WriteDispatch and makes it durable with Commit
// before it acknowledges it. Closing a replica writes a checkpoint, so the
// directory opens as a master's store (Open), which rebuilds the wheel from
// the schedule files minus the dispatch files: a promoted slave forwards
// every pending message when due. See "Replication" in the package
// documentation.
type Replica struct {
	dir  string
	lg   *zap.Logger
	lock *fsutil.DirLock

	mu        sync.Mutex
	hours     map[int64]*replicaHour
	schedules *fileCache
	dispatch  *fileCache
	dirty     map[*fileCache]map[int64]struct{}
	newFiles  bool
	following uint64 // ID of the master's store the copy follows
	marked    bool   // the marker file exists
	master    bool   // the directory held a master's store when opened
	ownID     uint64 // that store's ID (0: unknown)
	replayed  int64  // master message-log position the copy holds (Commit)
	lastCkpt  time.Time
	maxWAL    int64 // largest message-log offset a copied record names
	closed    bool
}

type replicaHour struct {
	scheduleSize, records, dispatchSize int64
}

// OpenReplica opens (creating if needed) a replica in dir. Every schedule
// and dispatch file is scanned and cut at its first invalid record (bytes
// copied but not committed when the slave died). A directory that holds a
// master's store (no replica marker) opens as well; Follow then drops it.
func OpenReplica(dir string, lg *zap.Logger) (*Replica, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	lock, err := lockDirs(dir)
	if err != nil {
		return nil, err
	}
	r := &Replica{dir: dir, lg: lg.Named("delayreplica"), lock: lock, hours: map[int64]*replicaHour{},
		schedules: newFileCache(filepath.Join(dir, scheduleDir), 64), dispatch: newFileCache(filepath.Join(dir, dispatchDir), 64),
		maxWAL: -1}
	r.dirty = map[*fileCache]map[int64]struct{}{r.schedules: {}, r.dispatch: {}}
	if err := r.load(); err != nil {
		r.closeFiles()
		return nil, fmt.Errorf("delay/store: open replica %s: %w", dir, err)
	}
	return r, nil
}

func (r *Replica) load() error {
	b, err := os.ReadFile(filepath.Join(r.dir, replicaFile))
	switch {
	case err == nil:
		if r.following, err = decodeReplicaMarker(b); err != nil {
			return err
		}
		r.marked = true
	case errors.Is(err, os.ErrNotExist):
		// A master's directory, or a new one.
		for _, p := range []string{checkpointFile, logDir, legacyLogDir, idFile} {
			if _, err := os.Stat(filepath.Join(r.dir, p)); err == nil {
				r.master = true
			}
		}
		r.ownID = readID(r.dir)
	default:
		return err
	}
	// A copy's checkpoint (Commit writes one now and then): every byte below
	// an hour's checkpointed size was fdatasynced before it, so only the
	// rest of each file is scanned.
	known := map[int64]hourCheckpoint{}
	ckptWAL := int64(0)
	if r.marked {
		ckpt, found, err := readCheckpoint(filepath.Join(r.dir, checkpointFile))
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return err
		}
		if found {
			for _, hc := range ckpt.hours {
				known[hc.hour] = hc
			}
			ckptWAL = ckpt.walOffset
		}
	}
	ents, err := os.ReadDir(filepath.Join(r.dir, scheduleDir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		h, ok := parseHourName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(r.dir, scheduleDir, e.Name())
		scan, base, err := scanCopy(path, known[h])
		if err != nil {
			return err
		}
		if scan.err != nil {
			r.lg.Info("cut schedule file copy at its first invalid record", zap.String("hour", e.Name()), zap.Error(scan.err))
			if err := os.Truncate(path, scan.end); err != nil {
				return err
			}
		}
		r.hours[h] = &replicaHour{scheduleSize: scan.end, records: base + scan.records}
		r.maxWAL = max(r.maxWAL, scan.lastWAL, ckptWAL-1)
	}
	ents, err = os.ReadDir(filepath.Join(r.dir, dispatchDir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		h, ok := parseHourName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(r.dir, dispatchDir, e.Name())
		st := r.hours[h]
		if st == nil {
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		_, valid := parseDispatch(b)
		if valid < int64(len(b)) {
			if err := os.Truncate(path, valid); err != nil {
				return err
			}
		}
		st.dispatchSize = valid
	}
	r.replayed = r.maxWAL + 1
	r.lg.Info("replica opened", zap.Bool("replica_marker", r.marked), zap.Uint64("following", r.following),
		zap.Bool("master_directory", r.master), zap.Int("hours", len(r.hours)))
	return nil
}

// scanCopy scans a schedule file of a copy from its checkpointed size when
// the file holds at least that much (else whole); base is the records below
// where the scan started.
func scanCopy(path string, hc hourCheckpoint) (scheduleScan, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return scheduleScan{}, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return scheduleScan{}, 0, err
	}
	from, base := int64(0), int64(0)
	if hc.size > 0 && info.Size() >= hc.size {
		from, base = hc.size, hc.records
	}
	res := scanScheduleFrom(f, from, -1, maxRecordSize, nil)
	if res.err != nil && !errors.Is(res.err, errTorn) {
		return res, 0, fmt.Errorf("scan %s: %w", path, res.err)
	}
	return res, base, nil
}

// Following returns the ID of the master's store the copy follows, and
// whether the directory is a replica's at all (false: new, or a master's
// store).
func (r *Replica) Following() (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.following, r.marked
}

// Follow makes the copy follow the master's store with ID store: a copy of
// another store, or a master's own store (a deposed master rejoining), may
// hold what that store never had, so it is dropped and the copy starts from
// empty. It reports whether the copy was dropped.
func (r *Replica) Follow(store uint64) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, ErrClosed
	}
	if r.marked && r.following == store {
		return false, nil
	}
	drop := len(r.hours) > 0 || r.master
	if drop {
		r.lg.Warn("dropping the copy: it is not a copy of this master's store", zap.Uint64("copy_of", r.following),
			zap.Bool("was_master", r.master), zap.Uint64("master_store", store), zap.Int("hours", len(r.hours)))
		if err := r.wipeLocked(); err != nil {
			return false, err
		}
	}
	if err := fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(r.dir, replicaFile), encodeReplicaMarker(store)); err != nil {
		return false, err
	}
	r.following, r.marked, r.master, r.ownID = store, true, false, 0
	return drop, nil
}

// Drop removes the copy and the marker: the next Follow starts from empty.
// A slave whose copy no longer lines up with its master's files (the
// master lost bytes the slave had copied) drops it and copies again.
func (r *Replica) Drop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.lg.Warn("dropping the copy", zap.Int("hours", len(r.hours)))
	if err := r.wipeLocked(); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(r.dir, replicaFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	r.following, r.marked, r.master, r.ownID = 0, false, false, 0
	return fsutil.SyncDir(r.dir)
}

// wipeLocked removes every file of the store.
func (r *Replica) wipeLocked() error {
	r.schedules.closeAll()
	r.dispatch.closeAll()
	for _, d := range []string{scheduleDir, dispatchDir, logDir} {
		if err := os.RemoveAll(filepath.Join(r.dir, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(r.dir, d), fsutil.DirMode); err != nil {
			return err
		}
	}
	for _, f := range []string{checkpointFile, idFile, originFile} {
		if err := os.Remove(filepath.Join(r.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	clear(r.hours)
	for _, m := range r.dirty {
		clear(m)
	}
	r.replayed, r.maxWAL = 0, -1
	return fsutil.SyncDir(r.dir)
}

// HourFiles returns the copy's state of every hour, ascending.
func (r *Replica) HourFiles() []HourFiles {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]HourFiles, 0, len(r.hours))
	for h, st := range r.hours {
		out = append(out, HourFiles{Hour: h, ScheduleSize: st.scheduleSize, Records: st.records, DispatchSize: st.dispatchSize})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hour < out[j].Hour })
	return out
}

// Hour returns the copy's state of hour h (zero when it has none).
func (r *Replica) Hour(h int64) HourFiles {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.hours[h]; st != nil {
		return HourFiles{Hour: h, ScheduleSize: st.scheduleSize, Records: st.records, DispatchSize: st.dispatchSize}
	}
	return HourFiles{Hour: h}
}

// Pending returns the copied messages not marked dispatched (dispatch
// entries counted, not de-duplicated).
func (r *Replica) Pending() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := int64(0)
	for _, st := range r.hours {
		n += max(st.records-st.dispatchSize/dispatchEntrySize, 0)
	}
	return n
}

// Replayed returns the master's message-log position the committed copy
// holds (its acknowledgement).
func (r *Replica) Replayed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replayed
}

// ErrReplicaMismatch: copied bytes do not continue the copy (another offset,
// or not whole valid records).
var ErrReplicaMismatch = errors.New("delay/store: copied bytes do not fit the copy")

// WriteSchedule writes whole schedule records copied from the master's file
// of hour h at offset off, which must be the copy's size. Every record is
// checked (length, CRC) before anything is written.
func (r *Replica) WriteSchedule(h, off int64, data []byte) error {
	var records int64
	for p := 0; p < len(data); {
		if len(data)-p < scheduleHeaderSize {
			return fmt.Errorf("%w: %s@%d: a cut record header", ErrReplicaMismatch, hourName(h), off+int64(p))
		}
		n := scheduleHeaderSize + int(binary.BigEndian.Uint32(data[p:]))
		if n > len(data)-p {
			return fmt.Errorf("%w: %s@%d: a cut record", ErrReplicaMismatch, hourName(h), off+int64(p))
		}
		if _, err := checkScheduleRecord(data[p : p+n]); err != nil {
			return fmt.Errorf("%w: %s@%d: %w", ErrReplicaMismatch, hourName(h), off+int64(p), err)
		}
		r.noteWAL(int64(binary.BigEndian.Uint64(data[p+8:])))
		records++
		p += n
	}
	return r.write(r.schedules, h, off, data, func(st *replicaHour) *int64 { return &st.scheduleSize }, func(st *replicaHour) { st.records += records })
}

func (r *Replica) noteWAL(w int64) {
	r.mu.Lock()
	r.maxWAL = max(r.maxWAL, w)
	r.mu.Unlock()
}

// WriteDispatch writes whole dispatch entries copied from the master's file
// of hour h at offset off, which must be the copy's size.
//
// Entries are written only up to the first one that names a record the
// copy does not hold yet (the master forwarded it after the schedule size
// the slave copied): the rest is written once the record is copied, so the
// copy never marks a record it lacks (after a promotion the new master's
// own record could land at that offset). The caller sees what was written
// in Hour.
func (r *Replica) WriteDispatch(h, off int64, data []byte) error {
	if _, valid := parseDispatch(data); valid != int64(len(data)) {
		return fmt.Errorf("%w: dispatch %s@%d: %d of %d bytes are whole valid entries", ErrReplicaMismatch, hourName(h), off, valid, len(data))
	}
	r.mu.Lock()
	size := int64(0)
	if st := r.hours[h]; st != nil {
		size = st.scheduleSize
	}
	r.mu.Unlock()
	n := 0
	for n < len(data) && int64(binary.BigEndian.Uint64(data[n:])&^cancelFlag) < size {
		n += dispatchEntrySize
	}
	return r.write(r.dispatch, h, off, data[:n], func(st *replicaHour) *int64 { return &st.dispatchSize }, func(*replicaHour) {})
}

func (r *Replica) write(files *fileCache, h, off int64, data []byte, size func(*replicaHour) *int64, grew func(*replicaHour)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if !r.marked {
		return ErrNotFollowing
	}
	st := r.hours[h]
	if st == nil {
		st = &replicaHour{}
	}
	if cur := *size(st); off != cur {
		return fmt.Errorf("%w: %s@%d, the copy ends at %d", ErrReplicaMismatch, hourName(h), off, cur)
	}
	if len(data) == 0 {
		return nil
	}
	if r.hours[h] == nil {
		r.hours[h] = st
		r.newFiles = true
	}
	cf, err := files.acquire(h, true)
	if err != nil {
		return err
	}
	defer files.release(cf)
	if _, err := cf.File.WriteAt(data, off); err != nil {
		// Cut what was written back to the size (the next open would cut
		// it too): on a full disk a partial write's bytes hold the space
		// the next copy needs.
		if terr := cf.File.Truncate(off); terr != nil {
			r.lg.Warn("cannot cut a copy back after a failed write", zap.String("hour", hourName(h)), zap.Error(terr))
		}
		return fmt.Errorf("write %s copy: %w", hourName(h), err)
	}
	*size(st) += int64(len(data))
	grew(st)
	r.dirty[files][h] = struct{}{}
	return nil
}

// RemoveHour removes hour h's files (the master's retention removed it).
func (r *Replica) RemoveHour(h int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hours[h] == nil {
		return nil
	}
	delete(r.hours, h)
	r.lastCkpt = time.Time{} // the next Commit writes a checkpoint without it
	for _, c := range []*fileCache{r.schedules, r.dispatch} {
		c.forget(h)
		delete(r.dirty[c], h)
		if err := os.Remove(filepath.Join(c.dir, hourName(h))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	r.newFiles = true
	return nil
}

// Commit makes everything written durable (fdatasync of each file written
// since the last Commit, and of the directories when files came or went)
// and records replayed, the master's message-log position the copy now
// holds.
func (r *Replica) Commit(replayed int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	for _, c := range []*fileCache{r.schedules, r.dispatch} {
		for h := range r.dirty[c] {
			cf, err := c.acquire(h, false)
			if err != nil {
				return err
			}
			err = cf.File.Sync()
			c.release(cf)
			if err != nil {
				return fmt.Errorf("sync %s copy: %w", hourName(h), err)
			}
		}
		clear(r.dirty[c])
	}
	if r.newFiles {
		for _, d := range []string{scheduleDir, dispatchDir} {
			if err := fsutil.SyncDir(filepath.Join(r.dir, d)); err != nil {
				return err
			}
		}
		r.newFiles = false
	}
	r.replayed = max(r.replayed, replayed)
	if time.Since(r.lastCkpt) >= replicaCheckpointEvery {
		// Lets a restart scan only what came after it.
		if err := r.checkpointLocked(); err != nil {
			return err
		}
		r.lastCkpt = time.Now()
	}
	return nil
}

// replicaCheckpointEvery is how often Commit writes the copy's checkpoint.
const replicaCheckpointEvery = 5 * time.Second

// Close commits, writes a checkpoint so the directory opens as a master's
// store, and releases the directory. The replica marker stays: Open turns
// the directory into a master's (promotion) when it finds it.
func (r *Replica) Close() error {
	if err := r.Commit(0); err != nil && !errors.Is(err, ErrClosed) {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.closeFiles()
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.checkpointLocked()
	r.closeFiles()
	return err
}

// checkpointLocked writes a checkpoint of the copy: the message log starts
// past every record the copy holds, and every hour has its copied size.
func (r *Replica) checkpointLocked() error {
	c := checkpoint{walOffset: max(r.replayed, r.maxWAL+1), hours: make([]hourCheckpoint, 0, len(r.hours))}
	for h, st := range r.hours {
		c.hours = append(c.hours, hourCheckpoint{hour: h, size: st.scheduleSize, records: st.records})
	}
	sort.Slice(c.hours, func(i, j int) bool { return c.hours[i].hour < c.hours[j].hour })
	return fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(r.dir, checkpointFile), c.encode())
}

func (r *Replica) closeFiles() {
	r.schedules.closeAll()
	r.dispatch.closeAll()
	r.lock.Unlock()
}

// Promote closes the replica and turns its directory into a master's
// store (a checkpoint of the copy, no message log, no marker): Open then
// recovers it as a master's and loads every pending message into the wheel.
func (r *Replica) Promote() error {
	r.mu.Lock()
	if r.marked && !r.closed {
		// Where the promoted store comes from: its parent may rejoin and
		// keep what the two share.
		if err := r.writeOriginLocked(); err != nil {
			r.mu.Unlock()
			return err
		}
	}
	r.mu.Unlock()
	if err := r.Close(); err != nil {
		return err
	}
	return unmarkReplicaDir(r.dir, r.lg)
}

func unmarkReplicaDir(dir string, lg *zap.Logger) error {
	for _, d := range []string{logDir, legacyLogDir} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return err
		}
	}
	// The promoted store is a store of its own: a new ID (Open makes it).
	if err := os.Remove(filepath.Join(dir, idFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Remove(filepath.Join(dir, replicaFile)); err != nil {
		return err
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return err
	}
	lg.Info("replica directory promoted to a master's store", zap.String("dir", dir))
	return nil
}

// promoteReplicaDir turns a replica's directory into a master's store when
// Open finds the marker (a slave that died while promoted, or started as a
// master): the copy is scanned, its checkpoint written, the marker removed.
func promoteReplicaDir(dir string, lg *zap.Logger) error {
	if _, err := os.Stat(filepath.Join(dir, replicaFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	r, err := OpenReplica(dir, lg)
	if err != nil {
		return err
	}
	return r.Promote()
}
