package store

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// TruncateReport says what Truncate did.
type TruncateReport struct {
	// MessageCut and ActionCut are the bytes removed from each log's end.
	MessageCut, ActionCut int64
	// CheckpointKept: the checkpoint lies at or below the cut, so the next
	// Open replays from it; otherwise it was removed with the derived
	// consume and pull logs, and the next Open rebuilds them from the logs.
	CheckpointKept bool
	// Wiped: no usable checkpoint and the action log no longer starts at 0
	// (its first actions were deleted), so groups could not be rebuilt:
	// every file was removed and the store must be copied again in full.
	Wiped bool
}

// Truncate cuts the closed store in dir back so that its message log ends
// at message and its action log at action (failover: an old master's
// records past the new master's promotion point were never copied and
// must go). Both offsets must be record boundaries of the two logs (the
// new master's logs are a byte-identical prefix of this store's up to
// them); ends already at or below them are left alone. The derived state
// follows: when the checkpoint lies at or below both offsets it stays and
// the next Open replays the logs from it (the consume logs are cut to what
// it replays, as after a crash); otherwise the checkpoint, consume logs and
// pull logs are removed first (so a crash in between only makes the next
// Open replay everything) and Open rebuilds them from the logs. The store
// must not be open: Truncate takes the directory lock.
func Truncate(dir string, opts Options, message, action int64, lg *zap.Logger) (TruncateReport, error) {
	var rep TruncateReport
	if err := opts.Validate(); err != nil {
		return rep, err
	}
	opts = opts.withDefaults()
	if lg == nil {
		lg = zap.NewNop()
	}
	lg = lg.Named("store")
	if message < 0 || action < 0 {
		return rep, fmt.Errorf("store: truncate to negative offsets (message %d, action %d)", message, action)
	}
	lock, err := fsutil.LockDir(dir)
	if err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	defer lock.Unlock()
	s := &Store{dir: dir, opts: opts, lg: lg}
	ck := s.loadCheckpoint()
	msgLog, actLog, err := openLogs(dir, opts)
	if err != nil {
		return rep, err
	}
	defer msgLog.Close()
	defer actLog.Close()
	msgEnd, err := endPast(msgLog, message)
	if err != nil {
		return rep, err
	}
	actEnd, err := endPast(actLog, action)
	if err != nil {
		return rep, err
	}
	rep.CheckpointKept = ck.msgOffset <= message && ck.actionOffset <= action
	if msgEnd <= message && actEnd <= action {
		return rep, nil // nothing past the point
	}
	rep.MessageCut, rep.ActionCut = max(msgEnd-message, 0), max(actEnd-action, 0)
	keepsData := func(l *segment.Log, off int64) bool {
		return off == 0 || (len(l.Segments()) > 0 && l.Segments()[0].Base < off)
	}
	if !rep.CheckpointKept && actLog.Start() > 0 || !keepsData(msgLog, message) || !keepsData(actLog, action) {
		rep.Wiped, rep.CheckpointKept = true, false
	}
	if !rep.CheckpointKept {
		// Derived state first, the checkpoint before it: a crash in
		// between leaves logs that the next Open replays in full.
		drop := []string{checkpointName, "consumelog", "pulllog"}
		if rep.Wiped {
			drop = append(drop, "messagelog", "actionlog")
		}
		for _, name := range drop {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return rep, fmt.Errorf("store: truncate: %w", err)
			}
		}
		if err := opts.FS.SyncDir(dir); err != nil {
			return rep, fmt.Errorf("store: truncate: %w", err)
		}
	}
	if !rep.Wiped {
		if msgEnd > message {
			if err := msgLog.Reset(message); err != nil {
				return rep, fmt.Errorf("store: truncate message log: %w", err)
			}
		}
		if actEnd > action {
			if err := actLog.Reset(action); err != nil {
				return rep, fmt.Errorf("store: truncate action log: %w", err)
			}
		}
	}
	lg.Warn("store truncated", zap.String("dir", dir), zap.Int64("message_end", message), zap.Int64("action_end", action),
		zap.Int64("message_bytes_cut", rep.MessageCut), zap.Int64("action_bytes_cut", rep.ActionCut),
		zap.Bool("checkpoint_kept", rep.CheckpointKept), zap.Bool("wiped", rep.Wiped))
	return rep, nil
}

// openLogs opens the message and action logs of the store in dir.
func openLogs(dir string, opts Options) (msgLog, actLog *segment.Log, err error) {
	msgLog, err = segment.OpenLog(filepath.Join(dir, "messagelog"), segment.LogOptions{FS: opts.FS, SegmentSize: opts.SegmentSize,
		// Generous, so lowering the limits never turns old records into damage.
		MaxRecordSize: max(int64(opts.Limits.MaxEncodedSize()+recordOverhead), 64<<20),
		NoMmap:        opts.Flush != FlushAsync}) // see doc.go, Writing through a mapping
	if err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	actLog, err = segment.OpenLog(filepath.Join(dir, "actionlog"), segment.LogOptions{FS: opts.FS, SegmentSize: opts.ActionSegmentSize, NoMmap: true})
	if err != nil {
		msgLog.Close()
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	return msgLog, actLog, nil
}

// endPast returns where a log's records end when some lie past off (off
// when none do), scanning only what follows off.
func endPast(l *segment.Log, off int64) (int64, error) {
	segs := l.Segments()
	if len(segs) == 0 || off >= segs[len(segs)-1].Base+segs[len(segs)-1].Size {
		return off, nil
	}
	res, err := l.Recover(max(off, l.Start()), true, func(int64, uint8, []byte) error { return nil })
	if err != nil {
		return 0, fmt.Errorf("store: truncate: scan %s past %d: %w", l.Dir(), off, err)
	}
	return max(res.End, off), nil
}
