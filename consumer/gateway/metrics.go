package gateway

import "github.com/prometheus/client_golang/prometheus"

// metrics are the gateway's Prometheus series (beside the Go and process
// collectors of pkg/opsserver).
type metrics struct {
	published *prometheus.CounterVec // by status
	stored    prometheus.Counter     // published{status="ok"}, looked up once
	pulled    prometheus.Counter
	acked     prometheus.Counter
	nacked    prometheus.Counter
	problems  *prometheus.CounterVec // by qmq status
	polls     prometheus.Gauge       // pulls and streams waiting now
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_gateway_published_messages_total", Help: "Messages published through the gateway, by status.",
		}, []string{"status"}),
		pulled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_gateway_pulled_messages_total", Help: "Messages handed to HTTP consumers (pulls and streams).",
		}),
		acked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_gateway_acked_messages_total", Help: "Messages HTTP consumers acked.",
		}),
		nacked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_gateway_nacked_messages_total", Help: "Messages HTTP consumers nacked.",
		}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_gateway_problems_total", Help: "Requests answered with a problem document, by qmq status.",
		}, []string{"status"}),
		polls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qmq_gateway_long_polls", Help: "Pulls and streams in progress.",
		}),
	}
	m.stored = m.published.WithLabelValues(statusOK)
	reg.MustRegister(m.published, m.pulled, m.acked, m.nacked, m.problems, m.polls,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "qmq_gateway_consumer_sessions", Help: "Open consumer sessions (consumer id, subject, group).",
		}, func() float64 { return float64(s.sessionCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "qmq_gateway_publishing_messages", Help: "Messages being published now.",
		}, func() float64 { return float64(s.inFlight.Load()) }),
	)
	return m
}
