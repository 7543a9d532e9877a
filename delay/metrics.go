package delay

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the delay server's Prometheus series (prefix qmq_delay_).
type metrics struct {
	received      prometheus.Counter
	rejected      *prometheus.CounterVec
	forwarded     prometheus.Counter
	forwardErrors prometheus.Counter
	fireLateness  prometheus.Histogram
	lateness      prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, group string, s *Server) *metrics {
	labels := prometheus.Labels{"group": group}
	buckets := []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}
	m := &metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_messages_received_total",
			Help: "Delayed messages received.", ConstLabels: labels}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_delay_messages_rejected_total",
			Help: "Delayed messages refused, by status.", ConstLabels: labels}, []string{"status"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_messages_forwarded_total",
			Help: "Due messages stored by a realtime broker.", ConstLabels: labels}),
		forwardErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_delay_forward_errors_total",
			Help: "Forwards that failed for an hour of retries and start again.", ConstLabels: labels}),
		fireLateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qmq_delay_fire_lateness_seconds",
			Help: "Time from a message's due time to its leaving the wheel.", ConstLabels: labels, Buckets: buckets}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qmq_delay_forward_lateness_seconds",
			Help: "Time from a message's due time to a realtime broker storing it.", ConstLabels: labels, Buckets: buckets}),
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_delay_messages_pending",
		Help: "Stored messages not yet forwarded.", ConstLabels: labels}, func() float64 { return float64(s.store.Stats().Pending) })
	inWheel := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_delay_messages_in_wheel",
		Help: "Messages loaded into the time wheel.", ConstLabels: labels}, func() float64 { return float64(s.store.Stats().InWheel) })
	reg.MustRegister(m.received, m.rejected, m.forwarded, m.forwardErrors, m.fireLateness, m.lateness, pending, inWheel,
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
	for _, h := range p.s.store.Stats().Hours {
		if n := h.Pending(); n > 0 {
			ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(n), h.Hour.UTC().Format("2006010215"))
		}
	}
}
