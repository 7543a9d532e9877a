package store

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Replication source: what a master's store offers its slave (see
// "Replication" in the package documentation). Schedule files only grow
// (the replay is deterministic, so bytes once written never change), dispatch
// files only grow, and retention removes whole hours; a slave that copies
// each file's new bytes at the same offsets holds the same hours. The store
// numbers its changes (one version per change, per run of the store) so a
// slave asks only for the hours changed since the version it holds.

// changeLog records which hours changed at which version; guarded by
// Store.mu.
type changeLog struct {
	run     uint64 // random per Open: versions of another run mean nothing
	version uint64
	changed map[int64]uint64 // hour → version of its last change
	removed map[int64]uint64 // hour removed by retention → version
	// replayed is the message-log position the hour sizes correspond to:
	// every record below it is in its schedule file.
	replayed int64
}

func newChangeLog() changeLog {
	var b [8]byte
	rand.Read(b[:])
	return changeLog{run: binary.BigEndian.Uint64(b[:]) | 1, changed: map[int64]uint64{}, removed: map[int64]uint64{}}
}

// noteLocked records a change of hour h.
func (c *changeLog) noteLocked(h int64) {
	c.version++
	c.changed[h] = c.version
	delete(c.removed, h)
}

// changes is the store's change log and the signal of its changes.
type changes struct {
	log changeLog
	changeSignal
}

// changeSignal hands out a channel closed at the next change (as the
// realtime store's commit signal).
type changeSignal struct {
	mu   sync.Mutex
	ch   chan struct{}
	used bool
}

func (c *changeSignal) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	c.used = true
	return c.ch
}

func (c *changeSignal) fire() {
	c.mu.Lock()
	if c.used {
		close(c.ch)
		c.ch = make(chan struct{})
		c.used = false
	}
	c.mu.Unlock()
}

// ChangeSignal returns a channel closed the next time an hour file grows or
// an hour is removed; take it before calling Manifest so no change is missed.
func (s *Store) ChangeSignal() <-chan struct{} { return s.changes.wait() }

// HourFiles is the state of one hour's files, as Manifest lists it.
type HourFiles struct {
	Hour         int64 // hours since the Unix epoch
	Removed      bool  // retention removed the hour
	ScheduleSize int64 // bytes of whole records in the schedule file
	Records      int64 // records in them
	DispatchSize int64 // bytes of whole entries in the dispatch file
}

// Manifest is what changed in the store since a version.
type Manifest struct {
	// Store is the store's ID (ID).
	Store        uint64
	Run, Version uint64
	// Replayed is the message-log position the listed schedule sizes cover.
	Replayed int64
	// Full says every hour is listed: hours not listed do not exist.
	Full bool
	// CaughtUp says the replay has caught up with the message log found at
	// Open: before that, schedule files may be shorter than a slave's copy
	// (cut back to the checkpoint and being rebuilt), and a full manifest
	// lacks the hours being rebuilt.
	CaughtUp bool
	Hours    []HourFiles // ascending by hour
}

// Manifest lists the hours changed after version since of run run; another
// run, or since 0, lists every hour (Full).
func (s *Store) Manifest(run, since uint64) Manifest {
	s.mu.Lock()
	c := &s.changes.log
	m := Manifest{Store: s.id, Run: c.run, Version: c.version, Replayed: c.replayed, CaughtUp: c.replayed >= s.recoveredEnd}
	m.Full = run != c.run || since == 0 || since > c.version
	for h, st := range s.hours {
		if m.Full || c.changed[h] > since {
			m.Hours = append(m.Hours, HourFiles{Hour: h, ScheduleSize: st.size, Records: st.records})
		}
	}
	if !m.Full {
		for h, v := range c.removed {
			if v > since {
				m.Hours = append(m.Hours, HourFiles{Hour: h, Removed: true})
			}
		}
	}
	s.mu.Unlock()
	for i := range m.Hours {
		if !m.Hours[i].Removed {
			m.Hours[i].DispatchSize = s.dispatch.wholeSize(m.Hours[i].Hour)
		}
	}
	sort.Slice(m.Hours, func(i, j int) bool { return m.Hours[i].Hour < m.Hours[j].Hour })
	return m
}

// ErrNoHour: the hour asked for does not exist (any more).
var ErrNoHour = errors.New("delay/store: no such hour")

// ReadSchedule returns whole records of hour h's schedule file from offset
// from (a record start) up to to, at most max bytes (at least the first
// record). It fails with ErrNoHour for an hour that does not exist and an
// error wrapping ErrCorrupt when no valid record starts at from.
func (s *Store) ReadSchedule(h, from, to int64, max int) ([]byte, error) {
	s.mu.Lock()
	st := s.hours[h]
	limit := int64(-1)
	if st != nil {
		limit = st.size
	}
	s.mu.Unlock()
	if limit < 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoHour, hourName(h))
	}
	to = min(to, limit)
	if from >= to {
		return nil, nil
	}
	cf, err := s.schedules.acquire(h, false)
	if err != nil {
		return nil, err
	}
	defer s.schedules.release(cf)
	want := min(to-from, int64(max))
	buf := make([]byte, max64(want, scheduleHeaderSize))
	if _, err := cf.File.ReadAt(buf[:scheduleHeaderSize], from); err != nil {
		return nil, err
	}
	first := scheduleHeaderSize + int64(binary.BigEndian.Uint32(buf))
	if first > to-from || first > maxRecordSize {
		return nil, fmt.Errorf("%w: no schedule record at %s@%d", ErrCorrupt, hourName(h), from)
	}
	if first > want {
		want = first
	}
	if int64(len(buf)) < want {
		buf = make([]byte, want)
	}
	buf = buf[:want]
	if _, err := cf.File.ReadAt(buf, from); err != nil {
		return nil, err
	}
	// The first record's CRC proves from is a record start; the slave
	// checks every record before it writes.
	if _, err := checkScheduleRecord(buf[:first]); err != nil {
		return nil, fmt.Errorf("%w: %s@%d: %w", ErrCorrupt, hourName(h), from, err)
	}
	n := first
	for n+scheduleHeaderSize <= int64(len(buf)) {
		k := scheduleHeaderSize + int64(binary.BigEndian.Uint32(buf[n:]))
		if n+k > int64(len(buf)) {
			break
		}
		n += k
	}
	return buf[:n], nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// ReadDispatch returns whole valid entries of hour h's dispatch file from
// offset from up to to, at most max bytes.
func (s *Store) ReadDispatch(h, from, to int64, max int) ([]byte, error) {
	if from%dispatchEntrySize != 0 {
		return nil, fmt.Errorf("%w: dispatch offset %d is not an entry start", ErrCorrupt, from)
	}
	to = min(to, s.dispatch.wholeSize(h))
	want := min(to-from, int64(max)/dispatchEntrySize*dispatchEntrySize)
	if want <= 0 {
		return nil, nil
	}
	b := make([]byte, want)
	f, err := os.Open(filepath.Join(s.dispatch.dir, hourName(h)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.ReadAt(b, from)
	if n < len(b) && err != nil {
		b = b[:n]
	}
	_, valid := parseDispatch(b[:len(b)/dispatchEntrySize*dispatchEntrySize])
	return b[:valid], nil
}

// wholeSize returns the size of hour h's dispatch file in whole entries:
// what this run has written, or for a file not appended to this run its
// size on disk.
func (d *dispatchLogs) wholeSize(h int64) int64 {
	d.mu.Lock()
	size, ok := d.sizes[h]
	d.mu.Unlock()
	if ok {
		return size
	}
	info, err := os.Stat(filepath.Join(d.dir, hourName(h)))
	if err != nil {
		return 0
	}
	return info.Size() / dispatchEntrySize * dispatchEntrySize
}

// Store ID file "id", written atomically when a store is created (and when
// a replica's directory becomes a master's store):
//
//	0            8           12
//	+------------+-----------+
//	| id u64     | crc u32   |
//	+------------+-----------+
//
// The ID names the store's data from its creation on; a slave's copy
// records the ID of the store it copies, so a copy of another store (a
// deposed master's own data, an older master's) is never mistaken for a
// prefix of this one.
const idFile = "id"

// ID returns the store's ID.
func (s *Store) ID() uint64 { return s.id }

// loadID reads the store's ID, creating one for a new store.
func loadID(dir string) (uint64, error) {
	path := filepath.Join(dir, idFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) == 12 && protocol.Checksum(b[:8]) == binary.BigEndian.Uint32(b[8:]) {
			return binary.BigEndian.Uint64(b), nil
		}
		return 0, fmt.Errorf("%w: store id file", ErrCorrupt)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	var r [8]byte
	rand.Read(r[:])
	id := binary.BigEndian.Uint64(r[:]) | 1
	b = binary.BigEndian.AppendUint64(nil, id)
	b = binary.BigEndian.AppendUint32(b, protocol.Checksum(b))
	if err := fsutil.WriteFileAtomic(fsutil.OS, path, b); err != nil {
		return 0, err
	}
	return id, nil
}

// LogEnd returns the end of the message log written so far: a message
// whose Append completed lies below it, so a master's slave holds it once
// the slave's copy covers a manifest whose Replayed is at least LogEnd.
func (s *Store) LogEnd() int64 { return s.written.Load() }
