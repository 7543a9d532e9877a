package realtime

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// brokerCollector reports, at each scrape, what the network server and the
// store hold now (see "Metrics" in doc.go): connections and requests in
// flight; subjects, consumer groups and consumers; each consumer group's
// backlog and un-acked messages; the messages retention would delete
// before their group takes them; the logs' disk; and the store's counters.
// Nothing is tallied on the hot paths: every value is read from
// netserver.Stats and store.Stats when Prometheus asks.
type brokerCollector struct {
	b *Broker

	connections, inFlight                                              *prometheus.Desc
	subjects, groups, consumers                                        *prometheus.Desc
	backlog, unacked, atRisk                                           *prometheus.Desc
	deadLetters                                                        *prometheus.Desc
	broadcastBacklog                                                   *prometheus.Desc
	logBytes, logSegments, actionLogBytes                              *prometheus.Desc
	openFiles                                                          *prometheus.Desc
	bufferBytes, bufferBytesInUse                                      *prometheus.Desc
	syncs, failedAppends                                               *prometheus.Desc
	corruptReads, corruptRanges, checkpoints, zeroFilled, cacheDropped *prometheus.Desc
}

func newBrokerCollector(b *Broker) *brokerCollector {
	labels := prometheus.Labels{"group": b.opts.Group}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("qmq_realtime_"+name, help, variable, labels)
	}
	perGroup := []string{"subject", "consumer_group"}
	return &brokerCollector{
		b:           b,
		connections: d("connections", "Open client connections."),
		inFlight:    d("requests_in_flight", "Requests being served or waiting for their reply to be written (long polls included)."),
		subjects:    d("subjects", "Subjects the store holds, retry and dead-letter subjects included."),
		groups:      d("consumer_groups", "Consumer groups (broadcast subscribers not counted)."),
		consumers:   d("consumers", "Consumers known to the broker, over all groups and broadcast subscriptions."),
		backlog: d("backlog_messages", "Messages a consumer group has not taken yet (from its cursor to the end, plus messages handed back by dead consumers).",
			perGroup...),
		unacked: d("unacked_messages", "Messages a consumer group's consumers took and have not acked.", perGroup...),
		atRisk: d("backlog_at_risk_messages", "Messages of a consumer group's backlog that the next retention pass would delete.",
			perGroup...),
		deadLetters: d("dead_letters", "Dead letters a consumer group holds (not re-driven nor purged); masters only.",
			perGroup...),
		broadcastBacklog: d("broadcast_backlog_messages", "Messages broadcast subscribers have not taken yet, summed over them."),
		logBytes:         d("message_log_bytes", "Disk taken by the kept message log (whole preallocated segments)."),
		logSegments:      d("message_log_segments", "Segments of the kept message log."),
		actionLogBytes:   d("action_log_bytes", "Disk taken by the action log."),
		openFiles:        d("open_log_files", "Consume-log and pull-log files open."),
		bufferBytes:      d("consume_log_buffer_bytes", "Memory of the subjects' consume-log buffers (outside the Go heap)."),
		bufferBytesInUse: d("consume_log_buffer_bytes_in_use", "Part of the consume-log buffer memory held by subjects."),
		syncs:            d("log_syncs_total", "Syncs (fdatasync) of the message log since the store opened."),
		failedAppends:    d("failed_appends_total", "Appends that failed in the store (a full disk, an I/O error) since it opened."),
		corruptReads:     d("corrupt_reads_total", "Entries or messages that failed their check when read and were not served, since the store opened."),
		corruptRanges:    d("corrupt_ranges_total", "Damaged log ranges recovery skipped when the store opened."),
		checkpoints:      d("checkpoints_total", "Checkpoints written since the store opened."),
		zeroFilled:       d("message_log_zero_filled_bytes_total", "Bytes of the message log written with zeros ahead of its end since the store opened."),
		cacheDropped:     d("message_log_cache_dropped_bytes_total", "Bytes of the message log dropped from the page cache behind its window since the store opened."),
	}
}

// Describe implements prometheus.Collector.
func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connections, c.inFlight, c.subjects, c.groups, c.consumers,
		c.backlog, c.unacked, c.atRisk, c.deadLetters, c.broadcastBacklog, c.logBytes, c.logSegments, c.actionLogBytes,
		c.openFiles, c.bufferBytes, c.bufferBytesInUse, c.syncs, c.failedAppends, c.corruptReads, c.corruptRanges, c.checkpoints, c.zeroFilled, c.cacheDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	ns := c.b.server.Stats()
	gauge(c.connections, float64(ns.Conns))
	gauge(c.inFlight, float64(ns.InFlight))

	st := c.b.st().Stats()
	gauge(c.subjects, float64(len(st.Subjects)))
	groups, consumers, broadcast := 0, 0, int64(0)
	for _, g := range st.Groups {
		consumers += len(g.Consumers)
		if g.Broadcast {
			broadcast += g.Backlog
			continue
		}
		groups++
		gauge(c.backlog, float64(g.Backlog), g.Subject, g.Group)
		gauge(c.unacked, float64(unackedOf(g)), g.Subject, g.Group)
		gauge(c.atRisk, float64(g.AtRisk), g.Subject, g.Group)
	}
	for subject, n := range c.b.deadLetterCounts(st.Subjects) {
		_, real, group, _ := protocol.ParseSystemSubject(subject)
		gauge(c.deadLetters, float64(n), real, group)
	}
	gauge(c.groups, float64(groups))
	gauge(c.consumers, float64(consumers))
	gauge(c.broadcastBacklog, float64(broadcast))
	gauge(c.logBytes, float64(st.MessageLogBytes))
	gauge(c.logSegments, float64(st.MessageLogSegments))
	gauge(c.actionLogBytes, float64(st.ActionLogBytes))
	gauge(c.openFiles, float64(st.OpenFiles))
	gauge(c.bufferBytes, float64(st.BufferBytes))
	gauge(c.bufferBytesInUse, float64(st.BufferBytesInUse))
	counter(c.syncs, st.Syncs)
	counter(c.failedAppends, st.FailedAppends)
	counter(c.corruptReads, st.CorruptReads)
	counter(c.corruptRanges, st.CorruptRanges)
	counter(c.zeroFilled, st.ZeroFilled)
	counter(c.cacheDropped, st.PageCacheDropped)
	counter(c.checkpoints, st.Checkpoints)
}

// unackedOf sums a group's consumers' un-acked messages.
func unackedOf(g store.GroupStats) int64 {
	var n int64
	for _, cs := range g.Consumers {
		n += cs.Unacked
	}
	return n
}
