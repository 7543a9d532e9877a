package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// Stores written before the message log moved onto pkg/segment keep it in
// dir/wal, in a format of their own (format 1), big-endian:
//
//	0           4           8                 16
//	+-----------+-----------+-----------------+------------------+
//	|  len u32  |  crc u32  | append ms (i64) | message (len B)  |
//	+-----------+-----------+-----------------+------------------+
//
// crc is CRC-32C over the append time and the message. Segments are files
// wal/<20-digit base>.wal; a zero len (or the file's end) ends a segment's
// data, and the next segment is named by the offset where it ended.
//
// Open converts such a log once, before recovery: the records from the
// checkpoint's replay position (the whole log without a checkpoint) are
// written to dir/log.tmp as message-log records with the same append times
// and messages, from that same offset on, fdatasynced; log.tmp is renamed
// to dir/log and dir/wal removed, each step followed by a directory sync.
// A crash before the rename converts again; after it, the new log is
// authoritative and what is left of wal/ is removed. The first torn or
// corrupt record ends the old log, as the old recovery did. Offsets before
// the replay position are never read again (the checkpoint covers them),
// and the converted records keep increasing from there, so schedule
// records stay in increasing log order.
const (
	legacyLogDir     = "wal"
	legacySuffix     = ".wal"
	legacyHeaderSize = 16
	// convertBatchBytes bounds the bytes one write of the conversion takes.
	convertBatchBytes = 8 << 20
)

// errLegacyUnconvertible is the refusal to convert an old log whose
// offsets cannot be mapped onto schedule files found without a checkpoint.
var errLegacyUnconvertible = errors.New("the message log is in the old format (wal/), its start was trimmed and the checkpoint is missing or corrupt: " +
	"start the previous release once on this directory (it rebuilds the schedule and writes a checkpoint), stop it, then start this one")

// convertLegacyLog converts dir's old-format message log, if any, into the
// current one; replayPos is the checkpoint's replay position (found: there
// is a checkpoint).
func convertLegacyLog(dir string, opts Options, replayPos int64, found bool, lg *zap.Logger) error {
	old := filepath.Join(dir, legacyLogDir)
	tmp := filepath.Join(dir, logDir+".tmp")
	if err := os.RemoveAll(tmp); err != nil { // a conversion that did not finish
		return err
	}
	bases, err := legacyBases(old)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, logDir)); err == nil || len(bases) == 0 {
		// Converted before (the removal did not finish), or nothing to convert.
		return removeSynced(old, dir)
	}
	from := replayPos
	if !found {
		if bases[0] != 0 {
			return fmt.Errorf("%w: %w", ErrCorrupt, errLegacyUnconvertible)
		}
		from = 0
	}
	if from < bases[0] {
		return fmt.Errorf("%w: old message log starts at %d, the replay at %d: segments are missing", ErrCorrupt, bases[0], from)
	}
	l, err := segment.OpenLog(tmp, logOptions(opts, opts.FS))
	if err != nil {
		return err
	}
	defer l.Close()
	l.SetEnd(from)
	b := l.NewBatch()
	var head [appendTimeSize]byte
	n, end, err := readLegacyLog(old, bases, from, func(appendMillis int64, msg []byte) error {
		if _, err := b.Append(logKindMessage, appendTime(head[:], appendMillis), msg); err != nil {
			return err
		}
		if b.Bytes() < convertBatchBytes {
			return nil
		}
		err := l.Write(b)
		b.Reset()
		return err
	})
	if err == nil {
		err = l.Write(b)
	}
	if err == nil {
		err = l.Sync()
	}
	if err != nil {
		return fmt.Errorf("convert old message log: %w", err)
	}
	if err := l.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, logDir)); err != nil {
		return err
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return err
	}
	lg.Info("converted the old message log", zap.Int64("from", from), zap.Int64("old_end", end), zap.Int("records", n))
	return removeSynced(old, dir)
}

// removeSynced removes path and syncs its parent directory.
func removeSynced(path, parent string) error {
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	return fsutil.SyncDir(parent)
}

// legacyBases lists the old log's segment bases, ascending.
func legacyBases(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		name := e.Name()
		if len(name) != 20+len(legacySuffix) || name[20:] != legacySuffix {
			continue
		}
		if b, err := strconv.ParseInt(name[:20], 10, 64); err == nil {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// readLegacyLog hands fn every valid old-format record from offset from
// (at least bases[0]) on, and returns how many there were and where they
// end.
func readLegacyLog(dir string, bases []int64, from int64, fn func(appendMillis int64, msg []byte) error) (int, int64, error) {
	i, _ := slices.BinarySearch(bases, from+1) // the first base past from
	i--
	pos, n := from, 0
	for {
		base := bases[i]
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%020d%s", base, legacySuffix)))
		if err != nil {
			return n, pos, err
		}
		for rel := pos - base; rel+legacyHeaderSize <= int64(len(data)); rel = pos - base {
			size := int64(binary.BigEndian.Uint32(data[rel:]))
			if size == 0 {
				break // the end of this segment's data
			}
			rec := data[rel:]
			if size < controlSize || size > maxRecordSize || legacyHeaderSize+size > int64(len(rec)) ||
				protocol.Checksum(rec[8:legacyHeaderSize+size]) != binary.BigEndian.Uint32(rec[4:8]) {
				return n, pos, nil // torn or corrupt: the old log ends here
			}
			if err := fn(int64(binary.BigEndian.Uint64(rec[8:16])), rec[legacyHeaderSize:legacyHeaderSize+size]); err != nil {
				return n, pos, err
			}
			n++
			pos += legacyHeaderSize + size
		}
		// The next segment, if any, is named by where this one's data ended.
		if i+1 >= len(bases) || bases[i+1] != pos {
			return n, pos, nil
		}
		i++
	}
}
