package metaserver

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// metrics are one server's Prometheus collectors, on a registry of its own
// so several servers can run in one process (tests).
type metrics struct {
	reg            *prometheus.Registry
	lookups        *prometheus.CounterVec
	lookupErrors   prometheus.Counter
	registers      prometheus.Counter
	heartbeats     prometheus.Counter
	routesAssigned prometheus.Counter
	relayed        *prometheus.CounterVec
	adminChanges   *prometheus.CounterVec
	switchovers    *prometheus.CounterVec
	lookupProducer prometheus.Counter // lookups.WithLabelValues("producer"), cached for the hot path
	lookupConsumer prometheus.Counter
	lookupDelay    prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_lookups_total", Help: "Route lookups served, by client type.",
	}, []string{"client_type"})
	m.lookupErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "qmq_meta_lookup_errors_total", Help: "Route lookups answered with an error.",
	})
	m.registers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "qmq_meta_broker_heartbeats_total", Help: "Broker registrations and heartbeats served.",
	})
	m.heartbeats = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "qmq_meta_client_heartbeats_total", Help: "Consumer heartbeats served.",
	})
	m.routesAssigned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "qmq_meta_routes_assigned_total", Help: "Routes this server created on a subject's first lookup.",
	})
	m.relayed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_relayed_requests_total", Help: "Admin requests relayed to brokers, by command.",
	}, []string{"command"})
	m.adminChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_admin_changes_total", Help: "Admin API changes, by outcome (ok, refused: no credential or right, error).",
	}, []string{"outcome"})
	m.switchovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_switchovers_total", Help: "Planned switchovers asked of this server, by outcome (ok, refused, unsupported, timeout, error).",
	}, []string{"outcome"})
	m.lookupProducer = m.lookups.WithLabelValues(protocol.ClientProducer.String())
	m.lookupConsumer = m.lookups.WithLabelValues(protocol.ClientConsumer.String())
	m.lookupDelay = m.lookups.WithLabelValues(protocol.ClientDelayProducer.String())
	revision := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qmq_meta_view_revision", Help: "etcd revision of this server's view.",
	}, func() float64 { rev, _ := s.view.revision(); return float64(rev) })
	watching := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qmq_meta_etcd_up", Help: "1 while etcd answers and the watch feeding the view is established.",
	}, func() float64 {
		if s.store.watching.Load() && s.store.etcdOK.Load() {
			return 1
		}
		return 0
	})
	s.failoverMetrics = newFailoverMetrics(m.reg)
	m.reg.MustRegister(m.lookups, m.lookupErrors, m.registers, m.heartbeats, m.routesAssigned, m.relayed,
		m.adminChanges, m.switchovers, revision, watching, groupStateCollector{s}, replicationCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) lookup(t protocol.ClientType) {
	switch t {
	case protocol.ClientProducer:
		m.lookupProducer.Inc()
	case protocol.ClientConsumer:
		m.lookupConsumer.Inc()
	case protocol.ClientDelayProducer:
		m.lookupDelay.Inc()
	}
}

// switchover counts a switchover by its outcome.
func (m *metrics) switchover(err error) {
	outcome := "error"
	switch {
	case err == nil:
		outcome = "ok"
	case errors.Is(err, errSwitchoverRefused), errors.Is(err, errNoSlave), errors.Is(err, errNoMasterSeat), errors.Is(err, errSwitchoverBusy):
		outcome = "refused"
	case errors.Is(err, errSwitchoverUnsupported):
		outcome = "unsupported"
	case errors.Is(err, errSwitchoverTimeout):
		outcome = "timeout"
	}
	m.switchovers.WithLabelValues(outcome).Inc()
}

// replicationCollector reports each registered broker's epoch and the
// replication lag it reports (a slave: its own; a master: its slave's).
type replicationCollector struct{ s *Server }

var (
	epochDesc = prometheus.NewDesc("qmq_meta_broker_epoch",
		"Epoch a registered broker serves in (a master's own, a slave's master's).", []string{"group", "role"}, nil)
	lagBytesDesc = prometheus.NewDesc("qmq_meta_replica_lag_bytes",
		"Replication lag in bytes a registered broker reports (a slave: its own; a master: its slave's).", []string{"group", "role"}, nil)
	lagSecondsDesc = prometheus.NewDesc("qmq_meta_replica_lag_seconds",
		"Replication lag in seconds a registered broker reports (a slave: its own; a master: its slave's).", []string{"group", "role"}, nil)
)

func (c replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- epochDesc
	ch <- lagBytesDesc
	ch <- lagSecondsDesc
}

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	for bk, e := range v.brokers {
		role := bk.role.String()
		ch <- prometheus.MustNewConstMetric(epochDesc, prometheus.GaugeValue, float64(e.rec.Epoch), bk.group, role)
		ch <- prometheus.MustNewConstMetric(lagBytesDesc, prometheus.GaugeValue, float64(e.rec.Load.ReplicaLagBytes), bk.group, role)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, float64(e.rec.Load.ReplicaLagMillis)/1000, bk.group, role)
	}
}

// groupStateCollector reports how many broker groups are in each state.
type groupStateCollector struct{ s *Server }

var groupStateDesc = prometheus.NewDesc("qmq_meta_broker_groups", "Broker groups by state.", []string{"state"}, nil)

func (c groupStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- groupStateDesc }

func (c groupStateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.s.groupCounts()
	ch <- prometheus.MustNewConstMetric(groupStateDesc, prometheus.GaugeValue, float64(counts.ReadWrite), "rw")
	ch <- prometheus.MustNewConstMetric(groupStateDesc, prometheus.GaugeValue, float64(counts.Readonly), "readonly")
	ch <- prometheus.MustNewConstMetric(groupStateDesc, prometheus.GaugeValue, float64(counts.Unavailable), "unavailable")
}
