package metaserver

import "github.com/prometheus/client_golang/prometheus"

// failoverMetrics count what the meta server decides for failover:
// elections, takeovers, changes of eligible sets and forced failovers.
type failoverMetrics struct {
	elections  *prometheus.CounterVec
	takeovers  *prometheus.CounterVec
	setChanges *prometheus.CounterVec
	forced     prometheus.Counter
}

func newFailoverMetrics(reg prometheus.Registerer) *failoverMetrics {
	m := &failoverMetrics{
		elections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_meta_elections_total",
			Help: "Elections for a free master seat, by outcome (won: a new group or its own master again; failover: its eligible slave; refused)."},
			[]string{"outcome"}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_meta_takeovers_total",
			Help: "Takeovers asked by eligible slaves of sync-mode groups, by outcome (ok, refused)."}, []string{"outcome"}),
		setChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qmq_meta_eligible_set_changes_total",
			Help: "Eligible sets changed by their masters, by kind (add, shrink, mode)."}, []string{"kind"}),
		forced: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_meta_forced_failovers_total",
			Help: "Unclean failovers an admin forced."}),
	}
	reg.MustRegister(m.elections, m.takeovers, m.setChanges, m.forced)
	return m
}
