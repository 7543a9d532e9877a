package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// metrics are the outbox's Prometheus series (prefix qmq_outbox_, label
// table).
type metrics struct {
	sent       *prometheus.CounterVec // by path: commit, watchdog
	failures   *prometheus.CounterVec // by path
	deleted    prometheus.Counter
	scanErrors prometheus.Counter
	waiting    prometheus.Gauge
	failed     prometheus.Gauge
	oldest     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, table string) (*metrics, error) {
	labels := prometheus.Labels{"table": table}
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_outbox_messages_sent_total",
			Help:        "Messages the broker acknowledged, by path (commit: right after the transaction; watchdog: left behind).",
			ConstLabels: labels}, []string{"path"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_outbox_send_failures_total",
			Help: "Sends that failed (the row stays for the watchdog), by path.", ConstLabels: labels}, []string{"path"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_outbox_rows_deleted_total",
			Help: "Rows deleted after the broker acknowledged their message.", ConstLabels: labels}),
		scanErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_outbox_scan_errors_total",
			Help: "Watchdog scans that failed on a database error.", ConstLabels: labels}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "qmq_outbox_rows_waiting",
			Help: "Rows whose message is not acknowledged yet, at the last count.", ConstLabels: labels}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "qmq_outbox_rows_failed",
			Help: "Rows the broker refused for good (invalid, too large), kept for an operator.", ConstLabels: labels}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "qmq_outbox_oldest_waiting_seconds",
			Help: "Age of the oldest waiting row at the last count (0 when none).", ConstLabels: labels}),
	}
	for _, s := range []string{pathCommit, pathWatchdog} {
		m.sent.WithLabelValues(s)
		m.failures.WithLabelValues(s)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.sent, m.failures, m.deleted, m.scanErrors, m.waiting, m.failed, m.oldest} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("outbox: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Stats describes the outbox table.
type Stats struct {
	// Waiting counts rows whose message is not acknowledged yet: those of
	// transactions committed a moment ago as well as those left behind.
	Waiting int64
	// Failed counts rows the broker refused for good.
	Failed int64
	// OldestWaiting is the age of the oldest waiting row (0 when none).
	OldestWaiting time.Duration
}

// Stats counts the table's rows (one query over the whole table).
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	rows, err := o.db.QueryContext(ctx, o.stmt.stats)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	defer rows.Close()
	var st Stats
	for rows.Next() {
		var (
			state, count int64
			oldest       sql.NullInt64
		)
		if err := rows.Scan(&state, &count, &oldest); err != nil {
			return Stats{}, fmt.Errorf("outbox: stats: %w", err)
		}
		switch state {
		case stateWaiting:
			st.Waiting = count
			if oldest.Valid {
				st.OldestWaiting = max(0, o.cfg.now().Sub(time.UnixMilli(oldest.Int64)))
			}
		case stateFailed:
			st.Failed = count
		}
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	return st, nil
}

// statsLoop counts the table's rows every stats interval for the gauges.
func (o *Outbox) statsLoop() {
	defer o.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), o.cfg.sendTimeout)
		st, err := o.Stats(ctx)
		cancel()
		if err != nil {
			o.lg.Warn("counting rows failed", zap.Error(err))
		} else {
			o.metrics.waiting.Set(float64(st.Waiting))
			o.metrics.failed.Set(float64(st.Failed))
			o.metrics.oldest.Set(st.OldestWaiting.Seconds())
		}
		if !sleepFor(o.stop, o.cfg.statsInterval) {
			return
		}
	}
}
