package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Dispatch log entry, big-endian; one file per hour, named dispatch/yyyyMMddHH
// like its schedule file:
//
//	0                         8           12
//	+-------------------------+-----------+
//	| schedule offset (u64)   |  crc u32  |
//	+-------------------------+-----------+
//
// Each entry says the message at that offset of the hour's schedule file
// has been forwarded and acknowledged by a realtime broker — or, with the
// top bit of the offset set (cancelFlag), that it was cancelled. crc is
// CRC-32C of the 8 offset bytes. A torn tail (a partial entry or one failing its CRC) is
// cut off when the hour is loaded.
const dispatchEntrySize = 12

func appendDispatchEntry(dst []byte, off int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(off))
	dst = append(dst, b[:]...)
	return binary.BigEndian.AppendUint32(dst, protocol.Checksum(b[:]))
}

// parseDispatch returns the sorted, de-duplicated offsets of the valid
// entries of b and the size of its valid prefix.
func parseDispatch(b []byte) ([]int64, int64) {
	offs := make([]int64, 0, len(b)/dispatchEntrySize)
	valid := int64(0)
	for len(b) >= dispatchEntrySize {
		if protocol.Checksum(b[:8]) != binary.BigEndian.Uint32(b[8:12]) {
			break
		}
		offs = append(offs, int64(binary.BigEndian.Uint64(b[:8])&^cancelFlag))
		b = b[dispatchEntrySize:]
		valid += dispatchEntrySize
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	out := offs[:0]
	for i, o := range offs {
		if i == 0 || o != offs[i-1] {
			out = append(out, o)
		}
	}
	return out, valid
}

// dispatchLogs appends to the per-hour dispatch files. Appends come from
// MarkDispatched callers; loads from the indexer. One mutex guards the files
// and their sizes: every write of a dispatch file happens under it.
type dispatchLogs struct {
	dir    string
	sync   bool // fdatasync every append
	mu     sync.Mutex
	files  *fileCache
	sizes  map[int64]int64 // valid size of each hour file checked this run
	dirty  map[int64]struct{}
	buf    []byte
	closed bool
}

func newDispatchLogs(dir string, maxOpen int, syncEach bool) *dispatchLogs {
	return &dispatchLogs{
		dir:   dir,
		sync:  syncEach,
		files: newFileCache(dir, maxOpen),
		sizes: make(map[int64]int64),
		dirty: make(map[int64]struct{}),
	}
}

// load reads hour h's dispatch file, cuts a torn tail, and returns the
// dispatched offsets, sorted and unique.
func (d *dispatchLogs) load(h int64) ([]int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loadLocked(h)
}

func (d *dispatchLogs) loadLocked(h int64) ([]int64, error) {
	path := filepath.Join(d.dir, hourName(h))
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		d.sizes[h] = 0
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	offs, valid := parseDispatch(b)
	if valid < int64(len(b)) {
		if err := os.Truncate(path, valid); err != nil {
			return nil, fmt.Errorf("truncate torn dispatch log %s: %w", path, err)
		}
	}
	d.sizes[h] = valid
	return offs, nil
}

// append records offsets of hour h as dispatched. The entries reach the
// operating system before it returns (they survive the process being
// killed); syncDirty makes them durable, or append itself when sync is set.
func (d *dispatchLogs) append(h int64, offs []int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	size, ok := d.sizes[h]
	if !ok {
		if _, err := d.loadLocked(h); err != nil {
			return err
		}
		size = d.sizes[h]
	}
	d.buf = d.buf[:0]
	for _, o := range offs {
		d.buf = appendDispatchEntry(d.buf, o)
	}
	cf, err := d.files.acquire(h, true)
	if err != nil {
		return err
	}
	defer d.files.release(cf)
	if _, err := cf.File.WriteAt(d.buf, size); err != nil {
		return fmt.Errorf("write dispatch log %s: %w", hourName(h), err)
	}
	d.sizes[h] = size + int64(len(d.buf))
	if d.sync {
		if err := cf.File.Sync(); err != nil {
			return fmt.Errorf("sync dispatch log %s: %w", hourName(h), err)
		}
		return nil
	}
	d.dirty[h] = struct{}{}
	return nil
}

// syncDirty fsyncs the files appended since the last call.
func (d *dispatchLogs) syncDirty() error {
	d.mu.Lock()
	hours := make([]int64, 0, len(d.dirty))
	for h := range d.dirty {
		hours = append(hours, h)
	}
	clear(d.dirty)
	d.mu.Unlock()
	var first error
	for _, h := range hours {
		cf, err := d.files.acquire(h, false)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) && first == nil {
				first = err
			}
			continue
		}
		if err := cf.File.Sync(); err != nil && first == nil {
			first = fmt.Errorf("sync dispatch log %s: %w", hourName(h), err)
		}
		d.files.release(cf)
	}
	return first
}

// remove deletes hour h's dispatch file.
func (d *dispatchLogs) remove(h int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files.forget(h)
	delete(d.sizes, h)
	delete(d.dirty, h)
	err := os.Remove(filepath.Join(d.dir, hourName(h)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (d *dispatchLogs) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.files.closeAll()
}

// cancelFlag marks a dispatch entry that records a cancel rather than a
// forward (cancel.go): the record at the offset in the low bits will never
// be forwarded. Loads skip both kinds alike.
const cancelFlag = uint64(1) << 63

// writeCancels appends cancel entries to the dispatch logs of their hours.
func (s *Store) writeCancels(cancels [][2]int64) error {
	byHour := map[int64][]int64{}
	for _, c := range cancels {
		byHour[c[0]] = append(byHour[c[0]], int64(uint64(c[1])|cancelFlag))
	}
	for h, offs := range byHour {
		if err := s.dispatch.append(h, offs); err != nil {
			return err
		}
		s.cancelsDirty = true
	}
	return nil
}

// parseCancels returns the offsets of the valid cancel entries of b.
func parseCancels(b []byte) []int64 {
	var offs []int64
	for len(b) >= dispatchEntrySize {
		if protocol.Checksum(b[:8]) != binary.BigEndian.Uint32(b[8:12]) {
			break
		}
		if o := binary.BigEndian.Uint64(b[:8]); o&cancelFlag != 0 {
			offs = append(offs, int64(o&^cancelFlag))
		}
		b = b[dispatchEntrySize:]
	}
	return offs
}
