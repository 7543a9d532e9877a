package realtime

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// metrics are the broker's Prometheus series (prefix qmq_realtime_).
type metrics struct {
	received    prometheus.Counter
	stored      prometheus.Counter
	duplicates  prometheus.Counter
	rejected    *prometheus.CounterVec
	pulled      prometheus.Counter
	acked       prometheus.Counter
	ackQueued   prometheus.Counter
	pullDropped prometheus.Counter
	pipelined   prometheus.Counter
	inline      prometheus.Counter
	inlineSlow  prometheus.Counter
	parked      prometheus.Gauge
	returned    prometheus.Counter
	retried     prometheus.Counter
	appendSecs  prometheus.Histogram
	// slaveWait is how long a stored send's reply waited for the slave's
	// copy (--wait-slave).
	slaveWait prometheus.Histogram
	// dedupeSeeded is how many ids a starting master put back into the
	// dedupe window from its log (seedDedupeLoop).
	dedupeSeeded prometheus.Gauge
	// requests counts requests by command (Broker.counted).
	requests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, group string) *metrics {
	labels := prometheus.Labels{"group": group}
	m := &metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_messages_received_total",
			Help: "Messages received in send requests.", ConstLabels: labels}),
		stored: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_messages_stored_total",
			Help: "Messages stored.", ConstLabels: labels}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_messages_duplicate_total",
			Help: "Messages dropped as copies of a stored message.", ConstLabels: labels}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_realtime_messages_rejected_total",
			Help: "Messages rejected, by status.", ConstLabels: labels}, []string{"status"}),
		pulled: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_messages_pulled_total",
			Help: "Messages handed to consumers.", ConstLabels: labels}),
		acked: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_acks_total",
			Help: "Acks served: an ack request of a range counts one, a list ack (protocol.AckList) one per pull seq it names.", ConstLabels: labels}),
		ackQueued: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_acks_queued_total",
			Help: "Ack requests served off the event loop from their consumer's ack queue, in the order they arrived (behind an ack that could not be applied at once).", ConstLabels: labels}),
		pullDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_pulls_dropped_total",
			Help: "Pull requests answered retry-later because they could not be served before their deadline.", ConstLabels: labels}),
		pipelined: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_pulls_pipelined_total",
			Help: "Pull requests sent while their consumer had earlier pulls in flight (answered with new messages only).", ConstLabels: labels}),
		inline: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_pulls_inline_total",
			Help: "Pull requests served on the event loop that read them (their group's actor was idle).", ConstLabels: labels}),
		inlineSlow: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_pulls_inline_slow_total",
			Help: "Pull requests served on the event loop that read from the disk or took longer than 20 ms, each sending its group's pulls to the pull workers for a second.", ConstLabels: labels}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "qmq_realtime_pulls_waiting",
			Help: "Pull requests waiting for messages (long polls).", ConstLabels: labels}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_messages_returned_total",
			Help: "Un-acked messages handed back to their group by dead or leaving consumers.", ConstLabels: labels}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_messages_lost_ack_retried_total",
			Help: "Messages sent to a retry subject because their ack was lost.", ConstLabels: labels}),
		appendSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qmq_realtime_append_seconds",
			Help: "Time from receiving a send request to its messages being stored.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		slaveWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "qmq_realtime_slave_wait_seconds",
			Help: "Time a stored send's reply waited for the slave's copy (--wait-slave).", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		dedupeSeeded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "qmq_realtime_dedupe_seeded_ids",
			Help: "Message ids this master put back into the dedupe window from its log when it started.", ConstLabels: labels}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_realtime_requests_total",
			Help: "Requests received, by command (malformed frames and unknown commands are not counted).", ConstLabels: labels}, []string{"command"}),
	}
	reg.MustRegister(m.received, m.stored, m.duplicates, m.rejected, m.pulled, m.acked, m.ackQueued, m.pullDropped,
		m.pipelined, m.inline, m.inlineSlow, m.parked, m.returned, m.retried, m.appendSecs, m.slaveWait, m.dedupeSeeded, m.requests)
	return m
}

// counted wraps a handler of cmd so that each request adds to
// qmq_realtime_requests_total (one atomic add: the series is looked up once,
// here).
func (b *Broker) counted(cmd protocol.Command, h netserver.HandlerFunc) netserver.Handler {
	n := b.metrics.requests.WithLabelValues(cmd.String())
	return netserver.HandlerFunc(func(r *netserver.Request) {
		n.Inc()
		h(r)
	})
}
