package netserver

import "github.com/prometheus/client_golang/prometheus"

// LimitsCollector exports a server's refusals and connection bounds as
// metrics named namespace_… (qmq_realtime, qmq_delay):
//
//	_refused_total{reason}             requests refused for their identity
//	                                   (unauthenticated, forbidden)
//	_partial_frame_bytes               bytes held in incomplete frames
//	_connections_closed_total{reason}  closed for a bound (partial, idle, slow)
//	_tls_handshake_failures_total      TLS handshakes that failed or timed out
//	_frame_pool_bytes                  idle large-frame buffers kept for reuse
//	_large_frames_total{buffer}        large frames by their buffer (reused, new)
//	_large_frames_chunked_total        large frames that came in chunks, not
//	                                   into a buffer reserved whole
//
// server is read at each scrape (a nil server exports nothing).
func LimitsCollector(namespace string, server func() *Server) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	return &limitsCollector{server: server,
		refused:    d("refused_total", "Requests (and messages of sends) refused for their identity, by reason.", "reason"),
		partial:    d("partial_frame_bytes", "Bytes held in incomplete request frames over all connections."),
		closed:     d("connections_closed_total", "Connections closed for a bound: partial (too many bytes in incomplete frames), idle, slow (under the minimum read rate).", "reason"),
		handshakes: d("tls_handshake_failures_total", "TLS handshakes that failed or timed out."),
		framePool:  d("frame_pool_bytes", "Idle large-frame buffers kept for reuse (Options.FramePoolBytes)."),
		frames:     d("large_frames_total", "Request frames larger than the read buffer, by their buffer: reused from the frame pool, or new.", "buffer"),
		chunked:    d("large_frames_chunked_total", "Request frames larger than the read buffer that came in chunks (copied once whole) instead of into a buffer reserved whole: half of the partial-frame bound was held so, the frame was over 4 MiB, or the connection was not yet authenticated."),
	}
}

type limitsCollector struct {
	server                               func() *Server
	refused, partial, closed, handshakes *prometheus.Desc
	framePool, frames, chunked           *prometheus.Desc
}

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.refused
	ch <- c.partial
	ch <- c.closed
	ch <- c.handshakes
	ch <- c.framePool
	ch <- c.frames
	ch <- c.chunked
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.server()
	if s == nil {
		return
	}
	st := s.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.refused, st.RefusedUnauthenticated, "unauthenticated")
	counter(c.refused, st.RefusedForbidden, "forbidden")
	ch <- prometheus.MustNewConstMetric(c.partial, prometheus.GaugeValue, float64(st.PartialBytes))
	counter(c.closed, st.ClosedPartial, "partial")
	counter(c.closed, st.ClosedIdle, "idle")
	counter(c.closed, st.ClosedSlow, "slow")
	counter(c.handshakes, st.HandshakeFailures)
	ch <- prometheus.MustNewConstMetric(c.framePool, prometheus.GaugeValue, float64(st.FramePoolBytes))
	counter(c.frames, st.FramesReused, "reused")
	counter(c.frames, st.FramesMade, "new")
	counter(c.chunked, st.FramesChunked)
}
