package realtime

import (
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// seedChunk is how many consume-log entries of a subject seedDedupeLoop
// reads at a time.
const seedChunk = 1024

// seedDedupeLoop fills the dedupe table with the (subject, id, attempts)
// of the messages stored within the dedupe window, newest first, so that a
// producer's retry or a delay server's re-forward of a message stored
// before this master started (it restarted, or it was a slave and a
// failover promoted it) is still answered "duplicate". Each subject's
// consume log is read backwards from its end in chunks until the messages
// are older than the window; seeding stops early when the broker closes or
// the table has taken half a generation of seeded hashes (remember,
// seedRoom). Live sends go on meanwhile. It closes t.dedupeSeeded when it
// ends. It belongs to the master's term t.
func (b *Broker) seedDedupeLoop(t *term) {
	defer t.wg.Done()
	defer close(t.dedupeSeeded)
	start := time.Now()
	cutoff := start.Add(-b.opts.DedupeWindow).UnixMilli()
	// The table takes about budget seeded ids (half a generation of every
	// shard); past a quarter more the shards are full and reading on
	// would only cost time.
	budget := t.dedupe.seedRoom()
	seeded, full := 0, 0
	for _, sj := range t.store.Stats().Subjects {
		end := sj.NextSeq
		for end > sj.MinSeq && seeded+full < budget+budget/4 {
			select {
			case <-t.stop:
				return
			default:
			}
			from := max(sj.MinSeq, end-seedChunk)
			msgs, err := t.store.Read(sj.Subject, from, int(end-from))
			if err != nil {
				b.lg.Warn("dedupe seeding: read failed", zap.String("subject", sj.Subject), zap.Error(err))
				break
			}
			old := false
			for i := len(msgs) - 1; i >= 0; i-- {
				m := msgs[i]
				if m.Timestamp < cutoff {
					old = true
					break
				}
				v, err := protocol.ParseMessage(m.Message)
				if err != nil {
					continue // Read validated it: cannot happen
				}
				if t.dedupe.remember(t.dedupe.key(v.Subject, v.ID, v.Attempts)) {
					seeded++
				} else {
					full++
				}
			}
			if old || len(msgs) == 0 {
				break
			}
			end = from
		}
	}
	b.metrics.dedupeSeeded.Set(float64(seeded))
	b.lg.Info("dedupe window seeded from the log", zap.Int("ids", seeded), zap.Int("no_room", full),
		zap.Duration("took", time.Since(start)))
}
