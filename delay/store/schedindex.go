package store

import (
	"errors"
	"hash/maphash"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// schedIndex finds stored messages by message id (of any subject) and by
// (subject, schedule key) for Cancel and for the key rule of Append. It
// holds hashes and locations only (no strings, no bodies): a lookup reads
// the record it points to and checks the names, so a hash collision costs
// a read, never a wrong answer. Keys (keyed messages only) are in a map;
// ids of every message are 8 bytes each in per-hour arrays — a 24-bit
// fingerprint of the id hash and the 40-bit offset — searched whole by a
// cancel by id (about 10 M entries in a few milliseconds, and a read for
// each of the ~N/2^24 false matches): a map of every id would cost ~30
// bytes a message. Messages enter it when the replay writes
// them into their hour file (and at Open, from the hour files with
// messages not yet dispatched); they leave it with their hour (retention).
// Keys being appended (not yet replayed) are reserved in byKey.
type schedIndex struct {
	mu    sync.Mutex
	seed  maphash.Seed
	byKey map[uint64]keyRef
	ids   map[int64][]uint64 // hour → fingerprint<<40 | offset, one per stored message
}

// keyRef is where a key's latest message is, its due time and its id hash.
type keyRef struct {
	loc uint64
	due int64
	id  uint64
	wal int64 // the record's message-log offset: a later append of the key wins
}

// reservedLoc marks a key whose message is being appended (not yet
// replayed); its due is reservedStored once the append is acknowledged.
const (
	reservedLoc    = ^uint64(0)
	reservedStored = 1
)

func newSchedIndex() *schedIndex {
	return &schedIndex{seed: maphash.MakeSeed(), byKey: map[uint64]keyRef{}, ids: map[int64][]uint64{}}
}

// packLoc names a record: hour (signed, 24 bits) and offset (40 bits).
func packLoc(h, off int64) uint64 { return uint64(h)<<40 | uint64(off)&(maxScheduleFile-1) }

func unpackLoc(l uint64) (h, off int64) { return int64(l) >> 40, int64(l & (maxScheduleFile - 1)) }

func (x *schedIndex) hash(kind byte, subject, name []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.Write(subject)
	h.WriteByte(kind)
	h.Write(name)
	return h.Sum64()
}

// idHash hashes a message id alone, so a lookup by id needs no subject
// (Find by id across subjects); a cancel by id checks the record's subject.
func (x *schedIndex) idHash(id []byte) uint64            { return x.hash(0, nil, id) }
func (x *schedIndex) keyHash(subject, key []byte) uint64 { return x.hash(1, subject, key) }

// scheduleKey returns the message's schedule key property, if it has one.
func scheduleKey(v *protocol.View) (key []byte, ok bool) {
	v.Properties(func(k, val []byte) bool {
		if string(k) == protocol.PropScheduleKey {
			key, ok = val, true
			return false
		}
		return true
	})
	return key, ok
}

// indexed is one message to index: its location, hashes and due time.
type indexed struct {
	loc, id, key uint64
	hasKey       bool
	due, wal     int64
}

// entryOf hashes the names of the message v stored at loc, appended at
// message-log offset wal.
func (x *schedIndex) entryOf(loc uint64, wal int64, v *protocol.View) indexed {
	e := indexed{loc: loc, id: x.idHash(v.ID), due: v.DeliverAtMillis, wal: wal}
	if key, ok := scheduleKey(v); ok {
		e.key, e.hasKey = x.keyHash(v.Subject, key), true
	}
	return e
}

// addLocked indexes a message.
func (x *schedIndex) addLocked(e indexed) {
	h, off := unpackLoc(e.loc)
	x.ids[h] = append(x.ids[h], fingerprint(e.id)|uint64(off))
	if e.hasKey {
		// The latest append of a key holds it: records are indexed out of
		// append order after a restart (hour by hour), and a reschedule's
		// new record may lie in an earlier hour than the old one.
		if r, ok := x.byKey[e.key]; !ok || r.loc == reservedLoc || r.wal < e.wal {
			x.byKey[e.key] = keyRef{loc: e.loc, due: e.due, id: e.id, wal: e.wal}
		}
	}
}

// add indexes messages.
func (x *schedIndex) add(es []indexed) {
	if len(es) == 0 {
		return
	}
	x.mu.Lock()
	for _, e := range es {
		x.addLocked(e)
	}
	x.mu.Unlock()
}

// fingerprint is the top 24 bits of an id hash, placed above a 40-bit
// offset.
func fingerprint(idh uint64) uint64 { return idh >> 40 << 40 }

// idLocs returns the locations whose id fingerprint matches idh's (the
// caller checks each record's id). It takes x.mu per hour, so appends and
// the replay wait at most one hour's scan.
func (x *schedIndex) idLocs(idh uint64) []uint64 {
	fp := fingerprint(idh)
	x.mu.Lock()
	hours := make([]int64, 0, len(x.ids))
	for h := range x.ids {
		hours = append(hours, h)
	}
	x.mu.Unlock()
	var out []uint64
	for _, h := range hours {
		x.mu.Lock()
		for _, e := range x.ids[h] {
			if e&^(maxScheduleFile-1) == fp {
				out = append(out, packLoc(h, int64(e&(maxScheduleFile-1))))
			}
		}
		x.mu.Unlock()
	}
	return out
}

// dropHours removes the entries of hours removed by retention.
func (x *schedIndex) dropHours(hours map[int64]bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, r := range x.byKey {
		if h, _ := unpackLoc(r.loc); r.loc != reservedLoc && hours[h] {
			delete(x.byKey, k)
		}
	}
	for h := range hours {
		delete(x.ids, h)
	}
}

// rebuildIndex indexes the messages of every hour file that still has
// messages not dispatched, as the hour sizes were at Open (the replay
// indexes what it adds), and fills the cancelled set from the cancel
// entries of their dispatch logs. It runs beside the other loops after
// Open (reading every pending message takes a while); until it is done
// Cancel waits and keyed appends answer retry later. Hours fully
// dispatched are not indexed: their messages are "not found" after a
// restart.
//
// Hour files of at most syncIndexBytes in all are indexed before Open
// returns.
func (s *Store) rebuildIndex(hours map[int64]hourCheckpoint) {
	defer s.wg.Done()
	defer close(s.indexReady)
	for h, hc := range hours {
		select {
		case <-s.quit:
			return
		default:
		}
		if err := s.indexHour(h, hc.size, hc.records); err != nil {
			s.lg.Error("cannot index an hour file for cancel; its messages answer not found", zap.String("hour", hourName(h)), zap.Error(err))
		}
	}
}

func (s *Store) indexHour(h, size, records int64) error {
	b, err := os.ReadFile(filepath.Join(s.dir, dispatchDir, hourName(h)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	done, _ := parseDispatch(b)
	if int64(len(done)) >= records {
		return nil
	}
	if cancels := parseCancels(b); len(cancels) > 0 {
		s.mu.Lock()
		for _, off := range cancels {
			s.cancelled.mark(h, off, cancelCounted)
		}
		s.mu.Unlock()
	}
	f, err := os.Open(filepath.Join(s.dir, scheduleDir, hourName(h)))
	if errors.Is(err, os.ErrNotExist) {
		return nil // removed by retention meanwhile
	}
	if err != nil {
		return err
	}
	defer f.Close()
	batch := make([]indexed, 0, 4096)
	flush := func() {
		s.idx.mu.Lock()
		for _, e := range batch {
			s.idx.addLocked(e)
		}
		s.idx.mu.Unlock()
		batch = batch[:0]
	}
	scan := scanScheduleWAL(f, 0, size, maxRecordSize, func(off, wal int64, msg []byte) bool {
		if v, err := protocol.ParseMessageNoCRC(msg); err == nil {
			batch = append(batch, s.idx.entryOf(packLoc(h, off), wal, &v))
			if len(batch) == cap(batch) {
				flush()
			}
		}
		return true
	})
	flush()
	if scan.err != nil && !errors.Is(scan.err, errTorn) {
		return scan.err
	}
	return nil
}

// syncIndexBytes is how many bytes of hour files Open indexes itself
// (about a second's read) rather than beside the other loops (a variable
// for tests).
var syncIndexBytes int64 = 64 << 20
