package failover

import "github.com/prometheus/client_golang/prometheus"

// memberMetrics are a Member's series (qmq_failover_*), labelled with its
// group and kind.
type memberMetrics struct {
	changes   *prometheus.CounterVec
	elections *prometheus.CounterVec
	demotions prometheus.Counter
}

func newMemberMetrics(m *Member, reg prometheus.Registerer) *memberMetrics {
	labels := prometheus.Labels{"group": m.opts.Group, "kind": m.opts.Kind.String()}
	mm := &memberMetrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_failover_write_state_changes_total", ConstLabels: labels,
			Help: "Changes of the master's write state, by the state entered and its reason."}, []string{"state", "reason"}),
		elections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_failover_elections_total", ConstLabels: labels,
			Help: "A slave's runs for its group's master seat, by how (campaign: the seat was free; takeover: its master did not answer) and outcome."},
			[]string{"how", "outcome"}),
		demotions: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_failover_demotions_total", ConstLabels: labels,
			Help: "Times this master became a slave (deposed, or handed over)."}),
	}
	reg.MustRegister(mm.changes, mm.elections, mm.demotions,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_failover_write_state", ConstLabels: labels,
			Help: "The master's write state: 1 writable, 2 alone, 3 readonly, 4 fenced, 5 deposed, 6 handing over (0 a slave)."},
			func() float64 { s, _ := m.WriteState(); return float64(s) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_failover_writable", ConstLabels: labels,
			Help: "1 while this broker takes and acknowledges writes."}, func() float64 {
			if m.gate.Open() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_failover_eligible_slave", ConstLabels: labels,
			Help: "1 while this master's group records an eligible slave (sync mode: it holds every acknowledged write)."}, func() float64 {
			if m.master.Load() && m.EligibleSlave() != "" {
				return 1
			}
			return 0
		}),
	)
	return mm
}
