package store

import (
	"encoding/binary"
	"fmt"
)

// Pull-log entry: 8 bytes, big-endian; entry p of a consumer names the
// consume sequence it got as pull sequence p:
//
//	0                          6            8
//	+--------------------------+------------+
//	| consume seq (48 bits)    |  check u16 |
//	+--------------------------+------------+
//
// check is 16 bits of a hash of (p, consume seq) (pullCheck), so a damaged,
// stale or misplaced entry is recognised (but for 1 in 65,536) and never
// served: it reads as void. All ones is a void entry: a pull sequence
// that maps to nothing (see actVoid).
const (
	pullEntryWidth       = 8
	voidEntry      int64 = -1
	voidBits             = ^uint64(0)
)

// pullFlushBytes is how many pull-log bytes a consumer buffers before
// writing them to its file (pull logs are rebuilt from the action log, so
// only checkpoints need them on disk). The write happens under the group's
// lock, inside a pull: at 4 KiB a consumer draining a backlog wrote every
// 512 entries (a pwrite per few pulls, ~3% of a flooded broker's CPU); at
// 32 KiB it writes an eighth as often. The cost is memory: up to 32 KiB per
// consumer that pulls (idle consumers buffer nothing past a checkpoint).
const pullFlushBytes = 32 << 10

// pullCheck mixes (p, seq) with splitmix64's finaliser and keeps 16 bits.
func pullCheck(p, seq int64) uint64 {
	x := uint64(p)*0x9E3779B97F4A7C15 ^ uint64(seq)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x & 0xffff
}

func encodePullEntry(p, seq int64) uint64 {
	if seq < 0 {
		return voidBits
	}
	return uint64(seq)<<16 | pullCheck(p, seq)
}

// decodePullEntry returns the consume seq of entry p, voidEntry for a void
// one, and ok false when the entry fails its check.
func decodePullEntry(p int64, v uint64) (int64, bool) {
	if v == voidBits {
		return voidEntry, true
	}
	seq := int64(v >> 16)
	if v&0xffff != pullCheck(p, seq) {
		return voidEntry, false
	}
	return seq, true
}

// writePullLog records consume seqs for pull seqs from first on. Entries are
// buffered; a failed flush keeps them buffered (a checkpoint reports it).
func (c *consumer) writePullLog(first int64, seqs []int64) error {
	if c.log == nil || len(seqs) == 0 {
		return nil
	}
	tail := c.plFlushed + int64(len(c.plPending)/pullEntryWidth)
	if first < tail {
		// Rewriting entries (recovery): go straight to the file.
		if err := c.flushPullLog(); err != nil {
			return err
		}
		buf := make([]byte, len(seqs)*pullEntryWidth)
		for i, v := range seqs {
			binary.BigEndian.PutUint64(buf[i*pullEntryWidth:], encodePullEntry(first+int64(i), v))
		}
		if err := c.log.WriteAt(first, buf); err != nil {
			c.log.Truncate(c.plFlushed)
			return fmt.Errorf("%w: pull log of %s: %w", ErrIO, c.id, err)
		}
		c.plFlushed = max(c.plFlushed, first+int64(len(seqs)))
		return nil
	}
	for ; tail < first; tail++ {
		c.plPending = binary.BigEndian.AppendUint64(c.plPending, voidBits)
	}
	for i, v := range seqs {
		c.plPending = binary.BigEndian.AppendUint64(c.plPending, encodePullEntry(first+int64(i), v))
	}
	if len(c.plPending) >= pullFlushBytes {
		c.flushPullLog()
	}
	return nil
}

// flushPullLog writes buffered pull-log entries to the file.
func (c *consumer) flushPullLog() error {
	if c.log == nil || len(c.plPending) == 0 {
		return nil
	}
	if c.log.Err() != nil {
		if err := c.log.Truncate(c.plFlushed); err != nil {
			return fmt.Errorf("%w: pull log of %s: %w", ErrIO, c.id, err)
		}
	}
	if err := c.log.WriteAt(c.plFlushed, c.plPending); err != nil {
		return fmt.Errorf("%w: pull log of %s: %w", ErrIO, c.id, err)
	}
	c.plFlushed += int64(len(c.plPending) / pullEntryWidth)
	c.plPending = c.plPending[:0]
	return nil
}

// readPullLog returns the consume seqs of pull seqs [from, from+n); entries
// that fail their check read as void and are counted in c.bad.
func (c *consumer) readPullLog(from int64, n int64) ([]int64, error) {
	out := make([]int64, n)
	if n == 0 {
		return out, nil
	}
	decode := func(p int64, v uint64) int64 {
		seq, ok := decodePullEntry(p, v)
		if !ok {
			c.bad++
		}
		return seq
	}
	i := int64(0)
	if from < c.plFlushed {
		k := min(n, c.plFlushed-from)
		buf := make([]byte, k*pullEntryWidth)
		got, err := c.log.ReadAt(from, buf)
		if err != nil {
			return nil, fmt.Errorf("pull log of %s: %w", c.id, err)
		}
		for ; i < k; i++ {
			if i < int64(got) {
				out[i] = decode(from+i, binary.BigEndian.Uint64(buf[i*pullEntryWidth:]))
			} else {
				out[i] = voidEntry
			}
		}
	}
	for ; i < n; i++ {
		at := (from + i - c.plFlushed) * pullEntryWidth
		if at+pullEntryWidth <= int64(len(c.plPending)) {
			out[i] = decode(from+i, binary.BigEndian.Uint64(c.plPending[at:]))
		} else {
			out[i] = voidEntry
		}
	}
	return out, nil
}

// writeVoids writes n void entries to the pull log from first, a chunk at
// a time: replay takes n from a record, which may name a gap far larger
// than maxVoid (a damaged range skipped, or a bogus sequence).
func (c *consumer) writeVoids(first, n int64) error {
	for n > 0 {
		k := min(n, int64(len(voidChunk)))
		if err := c.writePullLog(first, voidChunk[:k]); err != nil {
			return err
		}
		first, n = first+k, n-k
	}
	return nil
}
