package delay

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/metaclient"
)

// metrics are the delay server's Prometheus series (prefix qmq_delay_).
type metrics struct {
	received                     prometheus.Counter
	rejected                     *prometheus.CounterVec
	cancels                      *prometheus.CounterVec // cancel targets by answer
	reschedules                  *prometheus.CounterVec // reschedule targets by answer
	expired                      prometheus.Counter     // due messages dropped past their expiry
	cronOccurrences, cronSkipped prometheus.Counter
	forwarded                    prometheus.Counter
	forwardErrors                prometheus.Counter
	fireLateness                 prometheus.Histogram
	lateness                     prometheus.Histogram
	rates                        *metaclient.Rates // in/out rates for the heartbeats
}

func newMetrics(reg prometheus.Registerer, group string, s *Server) *metrics {
	labels := prometheus.Labels{"group": group}
	buckets := []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}
	m := &metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_messages_received_total",
			Help: "Delayed messages received.", ConstLabels: labels}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_delay_messages_rejected_total",
			Help: "Delayed messages refused, by status.", ConstLabels: labels}, []string{"status"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_delay_cancels_total",
			Help: "Cancel targets answered, by answer.", ConstLabels: labels}, []string{"status"}),
		reschedules: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_delay_reschedules_total",
			Help: "Reschedule targets answered, by answer.", ConstLabels: labels}, []string{"status"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_messages_expired_total",
			Help: "Due messages dropped instead of forwarded: past their expiry (qmq.expire.at).", ConstLabels: labels}),
		cronOccurrences: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_cron_occurrences_total",
			Help: "Occurrences of recurring schedules stored by a realtime broker.", ConstLabels: labels}),
		cronSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_cron_skipped_total",
			Help: "Missed occurrences of recurring schedules skipped (qmq.cron.missed=skip).", ConstLabels: labels}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_messages_forwarded_total",
			Help: "Due messages stored by a realtime broker.", ConstLabels: labels}),
		forwardErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_forward_errors_total",
			Help: "Forwards that failed for an hour of retries and start again.", ConstLabels: labels}),
		fireLateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qmq_delay_fire_lateness_seconds",
			Help: "Time from a message's due time to its leaving the wheel.", ConstLabels: labels, Buckets: buckets}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qmq_delay_forward_lateness_seconds",
			Help: "Time from a message's due time to a realtime broker storing it.", ConstLabels: labels, Buckets: buckets}),
		rates: &metaclient.Rates{},
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	bool01 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	reg.MustRegister(m.received, m.rejected, m.cancels, m.reschedules, m.expired, m.cronOccurrences, m.cronSkipped, m.forwarded, m.forwardErrors, m.fireLateness, m.lateness,
		gauge("qmq_delay_messages_pending", "Stored messages not yet forwarded (on a slave: copied, not marked dispatched).",
			func() float64 { return float64(s.Stats().Pending) }),
		gauge("qmq_delay_messages_in_wheel", "Messages loaded into the time wheel.",
			func() float64 { return float64(s.Stats().InWheel) }),
		gauge("qmq_delay_store_refusing", "1 while the store refuses messages (a failed write; schedule files or a new message-log segment that cannot be written, as on a full disk).",
			func() float64 { return bool01(s.Stats().Refusing != "") }),
		gauge("qmq_delay_role", "1 master, 2 slave, 0 changing role.", func() float64 {
			switch s.Role() {
			case RoleMaster:
				return 1
			case RoleSlave:
				return 2
			}
			return 0
		}),
		gauge("qmq_delay_epoch", "The group's epoch this server serves in (a slave: its master's).",
			func() float64 { return float64(s.Replication().Epoch) }),
		gauge("qmq_delay_fenced", "1 while a master takes no sends and forwards nothing (registration not renewed in time).",
			func() float64 { return bool01(s.Replication().Fenced) }),
		gauge("qmq_delay_replication_lag_bytes", "A master: message-log bytes its slave's copy lacks; a slave: bytes of the last manifest not copied yet.",
			func() float64 { return float64(s.Replication().LagBytes) }),
		gauge("qmq_delay_replication_lag_seconds", "A master: age of the oldest bytes its slave lacks; a slave: time since its copy last held all its master had.",
			func() float64 { return s.Replication().Lag.Seconds() }),
		gauge("qmq_delay_waiting_acks", "Send replies waiting for the slave's copy (--wait-slave).",
			func() float64 { return float64(s.Replication().WaitingAcks) }),
		gauge("qmq_delay_sync_bytes_served", "Hour-file bytes this master has sent its slave since it started serving.", func() float64 {
			if m, _ := s.current(); m != nil {
				return float64(m.src.served.Load())
			}
			return 0
		}),
		gauge("qmq_delay_slave_lag_readonly", "1 while the master is readonly because its slave lags (--wait-slave).",
			func() float64 { return bool01(s.Replication().Readonly) }),
		&pendingByHour{s: s, desc: prometheus.NewDesc("qmq_delay_messages_pending_by_hour",
			"Messages not yet forwarded, by hour of due time (UTC, yyyyMMddHH).", []string{"hour"}, labels)})
	return m
}

// pendingByHour exports the pending count of every hour with messages.
type pendingByHour struct {
	s    *Server
	desc *prometheus.Desc
}

func (p *pendingByHour) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *pendingByHour) Collect(ch chan<- prometheus.Metric) {
	for _, h := range p.s.Stats().Hours {
		if n := h.Pending(); n > 0 {
			ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(n), h.Hour.UTC().Format("2006010215"))
		}
	}
}
