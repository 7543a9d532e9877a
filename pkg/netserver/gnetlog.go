package netserver

import (
	"sync/atomic"

	"go.uber.org/zap"
)

// gnetLogger routes gnet's own log lines to the server's zap logger until
// the server is closed. gnet keeps its logger as a process-wide default, so
// a closed server must stop writing to a logger that may be gone (a test's
// zaptest logger panics when used after its test).
type gnetLogger struct {
	lg          atomic.Pointer[zap.SugaredLogger]
	quietErrors atomic.Bool // the server is stopping gnet: its errors are expected
}

func newGnetLogger(lg *zap.Logger) *gnetLogger {
	g := &gnetLogger{}
	g.lg.Store(lg.Sugar())
	return g
}

func (g *gnetLogger) detach() { g.lg.Store(zap.NewNop().Sugar()) }

// quiet logs gnet's errors at debug level from now on: the server stops
// gnet by shutting its listener down, which gnet reports as a failed accept.
func (g *gnetLogger) quiet() { g.quietErrors.Store(true) }

func (g *gnetLogger) Debugf(format string, args ...any) { g.lg.Load().Debugf(format, args...) }
func (g *gnetLogger) Infof(format string, args ...any)  { g.lg.Load().Infof(format, args...) }
func (g *gnetLogger) Warnf(format string, args ...any)  { g.lg.Load().Warnf(format, args...) }
func (g *gnetLogger) Errorf(format string, args ...any) {
	if g.quietErrors.Load() {
		g.lg.Load().Debugf(format, args...)
		return
	}
	g.lg.Load().Errorf(format, args...)
}

// Fatalf logs at error level: a library must not exit the process.
func (g *gnetLogger) Fatalf(format string, args ...any) { g.Errorf(format, args...) }
