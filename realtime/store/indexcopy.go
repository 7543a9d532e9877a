package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"go.uber.org/zap"
)

// A replica's message index copied from its master (Options.Replica with
// Options.CopyMessageIndex): the copy's message log is byte-identical to
// the master's at the same offsets, so the master's run files index it as
// they are. The replica neither hashes the records it copies nor builds,
// sorts and writes runs of its own (10-15 ms of CPU per 100,000 messages
// on the test machine, NOTES.md); its index ends where the last copied run
// ends. The master reads its runs out (ReadIndexRun), the slave installs
// each whole file (Replica.AddIndexRun: written to a temporary file,
// fsynced, renamed, then checked as Open checks a run), and a run only
// once the copy has indexed every record it covers.
//
// Promote (or BuildMessageIndex, when the master has no runs to give)
// turns the index back to indexing the log: indexLoop reads back what lies
// past the last copied run, as crash recovery does (at most a run of
// records), not the whole log. Until then a lookup waits (indexCatchUp)
// for the index to reach the committed end it saw and, if it does not,
// fails with ErrIndexBehind rather than miss a message.
// A lookup on a copying replica reads the runs and, past the last one,
// the committed log itself (at most a run's records: the master writes a
// run at each segment's end), so it misses nothing.
// A copied run that does not check is removed and the replica builds its
// index from the log instead; a run whose bucket a lookup cannot read is
// built again from the log (rebuildDamaged), as a master's.

// ErrIndexBehind: the message index has not reached the committed end yet
// (a replica copying its master's runs, or one promoted and still
// indexing the log past them); try again.
var ErrIndexBehind = errors.New("store: the message index is catching up")

// ErrIndexRunMismatch: no run of this store's index starts at the offset
// asked (ReadIndexRun), or a copied run does not start at the replica's
// index end or does not check (AddIndexRun): the replica must build its
// own index (BuildMessageIndex).
var ErrIndexRunMismatch = errors.New("store: no matching message-index run")

// ErrIndexRunAhead: a copied run covers records the replica has not
// indexed yet; add it again once it has.
var ErrIndexRunAhead = errors.New("store: the index run reaches past the copy")

// ReadIndexRun reads into buf the bytes at pos of the index run file that
// starts at message-log offset from, and returns how many it read, the
// file's size and the end of the log range the run covers. Size 0: no run
// starts there yet (the entries from there are still in memory).
// ErrIndexRunMismatch: none starts there and none will.
func (s *Store) ReadIndexRun(from, pos int64, buf []byte) (n int, size, to int64, err error) {
	x := s.index
	if x == nil || x.copying.Load() {
		return 0, 0, 0, ErrIndexRunMismatch
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, r := range x.runs {
		if r.from != from {
			continue
		}
		if r.format != 3 {
			return 0, 0, 0, fmt.Errorf("%w: the run at %d is of format %d", ErrIndexRunMismatch, from, r.format)
		}
		size = int64(indexDataAt3 + r.count*indexEntrySize3)
		if pos > size {
			return 0, 0, 0, fmt.Errorf("%w: position %d past the run's %d bytes", ErrIndexRunMismatch, pos, size)
		}
		n, err = r.f.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: %w", ErrIO, err)
		}
		return n, size, r.to, nil
	}
	if from == x.memFrom {
		return 0, 0, 0, nil
	}
	return 0, 0, 0, fmt.Errorf("%w: no run starts at %d", ErrIndexRunMismatch, from)
}

// CopiedIndexEnd returns where the replica's index ends (the next copied
// run starts there), whether it copies its master's runs, and whether the
// copy has records past that end (a run to fetch).
func (r *Replica) CopiedIndexEnd() (end int64, copying, behind bool) {
	x := r.s.index
	if x == nil || !x.copying.Load() {
		return 0, false, false
	}
	end = x.end.Load()
	return end, true, r.s.goodEnd.Load() > end
}

// AddIndexRun installs image, a run file fetched from the master, as the
// replica's next run. It returns ErrIndexRunAhead when the copy has not yet
// indexed every record the run covers (try again later), and
// ErrIndexRunMismatch when the run does not start at the index's end, does
// not check, or the index no longer copies (the caller builds the index
// from the log: BuildMessageIndex).
func (r *Replica) AddIndexRun(image []byte) error {
	s := r.s
	x := s.index
	if x == nil {
		return ErrNoIndex
	}
	x.copyMu.Lock()
	defer x.copyMu.Unlock()
	if !x.copying.Load() {
		return fmt.Errorf("%w: the index does not copy runs", ErrIndexRunMismatch)
	}
	if len(image) < indexDataAt3 || string(image[:8]) != indexMagic3 {
		return fmt.Errorf("%w: not a run of format 3", ErrIndexRunMismatch)
	}
	from, to := int64(binary.BigEndian.Uint64(image[8:])), int64(binary.BigEndian.Uint64(image[16:]))
	if end := x.end.Load(); from != end || to < from {
		return fmt.Errorf("%w: a run of [%d, %d) for an index ending at %d", ErrIndexRunMismatch, from, to, end)
	}
	if to > s.goodEnd.Load() {
		return fmt.Errorf("%w: a run to %d, the copy indexed to %d", ErrIndexRunAhead, to, s.goodEnd.Load())
	}
	path, err := writeRunFile(x.dir, from, image)
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	run, err := openIndexRun(path)
	if err == nil && (run.format != 3 || run.from != from || run.to != to) {
		err = errors.New("header changed")
	}
	if err != nil {
		if run != nil {
			run.f.Close()
		}
		_ = os.Remove(path)
		x.lg.Warn("a copied index run does not check: indexing the log instead", zap.Int64("from", from), zap.Error(err))
		return fmt.Errorf("%w: the run at %d: %w", ErrIndexRunMismatch, from, err)
	}
	x.mu.Lock()
	x.runs = append(x.runs, run)
	x.memFrom, x.memSeg = to, -1
	x.end.Store(to)
	x.mu.Unlock()
	return nil
}

// BuildMessageIndex stops copying the master's runs: the index follows the
// replica's log from the last run on (reading back what lies past it).
func (r *Replica) BuildMessageIndex() {
	if x := r.s.index; x != nil {
		x.stopCopying(r.s.goodEnd.Load())
	}
}

// stopCopying turns a copying index to indexing the log (a lookup says it
// is catching up until it reaches catchUpTo).
func (x *messageIndex) stopCopying(catchUpTo int64) {
	x.copyMu.Lock()
	defer x.copyMu.Unlock()
	if !x.copying.Load() {
		return
	}
	x.catchUpTo.Store(catchUpTo)
	x.copying.Store(false)
	x.wake()
}

// wake nudges indexLoop.
func (x *messageIndex) wake() {
	select {
	case x.nudge <- struct{}{}:
	default:
	}
}

// findCopied is find on a copying index: the candidates of its runs, and
// the records past the last run up to target read back from the log.
func (s *Store) findCopied(kind byte, v string, target int64) ([]Found, error) {
	x := s.index
	end := x.end.Load()
	offs, err := x.candidates(kind, []byte(v))
	if err != nil {
		return nil, err
	}
	if end < target {
		tail, err := s.indexRange(make([]byte, indexReadBytes), end, target)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrIndexBehind, err)
		}
		h := indexHash(kind, []byte(v))
		for _, e := range tail {
			if e.hash == h {
				offs = append(offs, e.off)
			}
		}
		// A run added meanwhile may hold some of them too.
		slices.Sort(offs)
		offs = slices.Compact(offs)
	}
	return s.matchFound(kind, v, offs), nil
}
