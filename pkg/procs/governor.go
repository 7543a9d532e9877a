package procs

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Options configure a Governor. Zero fields take the defaults.
type Options struct {
	// Max is the processors for a busy process (default: GOMAXPROCS when
	// New is called).
	Max int
	// Window is how often the load is sampled (default 100 ms).
	Window time.Duration
	// Up is the cores used in a Window, on one processor, that count as
	// saturated (default 0.9: one processor is nearly full).
	Up float64
	// UpLatency is the mean time goroutines waited for the one processor
	// over a Window (the Go scheduler's /sched/latencies) that counts as
	// saturated too, in a Window with at least UpLatencyCores used
	// (defaults 1 ms and 0.3): a saturated processor may show well under
	// Up cores of CPU time (its goroutines wait on one another), never
	// short waits. Measured on a 2-vCPU VM on one processor: the broker
	// producing flat out used 0.36–0.56 cores with waits of 2.6–4 ms; at a
	// steady 20,000 msg/s it used 0.3–0.5 cores with waits of 0.13–0.48 ms
	// and kept up. (An idle process shows long waits now and then: a few
	// goroutines behind a collection.)
	UpLatency      time.Duration
	UpLatencyCores float64
	// UpAfter is the saturated Windows in a row that switch to Max
	// (default 2: one Window's spike is not a load).
	UpAfter int
	// Down is the cores under which, for DownAfter Windows in a row on
	// Max, the process tries one processor again (default 1.2: on Max the
	// runtime's wake-ups cost more CPU than the same load on one, so a
	// process that fits in one core uses more than one on Max;
	// DownAfter default 20: two seconds). A process that comes back up
	// within three times that waits twice as long before its next try
	// (up to 64 times), so a load that needs Max does not flap.
	Down      float64
	DownAfter int
	// DownLatency: a Window on Max counts towards switching down only if
	// goroutines waited less than this for a processor on average (default
	// 150 µs). Measured on Max (2 processors): the broker producing flat
	// out, which used under Down cores there but saturated one processor,
	// waited 100–500 µs (mostly over 200); at a steady 20,000 msg/s, 36–95
	// µs. Without it the producing broker went down every DownAfter and came
	// straight back up.
	DownLatency time.Duration
}

// ErrInvalidOptions is wrapped by Validate's errors.
var ErrInvalidOptions = errors.New("procs: invalid options")

func (o *Options) applyDefaults() {
	if o.Max == 0 {
		o.Max = runtime.GOMAXPROCS(0)
	}
	if o.Window == 0 {
		o.Window = 100 * time.Millisecond
	}
	if o.Up == 0 {
		o.Up = 0.9
	}
	if o.UpLatency == 0 {
		o.UpLatency = time.Millisecond
	}
	if o.UpLatencyCores == 0 {
		o.UpLatencyCores = 0.3
	}
	if o.UpAfter == 0 {
		o.UpAfter = 2
	}
	if o.Down == 0 {
		o.Down = 1.2
	}
	if o.DownAfter == 0 {
		o.DownAfter = 20
	}
	if o.DownLatency == 0 {
		o.DownLatency = 150 * time.Microsecond
	}
}

// Validate checks the options after defaults.
func (o Options) Validate() error {
	o.applyDefaults()
	switch {
	case o.Max < 1:
		return fmt.Errorf("%w: Max %d", ErrInvalidOptions, o.Max)
	case o.Window < time.Millisecond:
		return fmt.Errorf("%w: Window %v is under 1ms", ErrInvalidOptions, o.Window)
	case o.Up <= 0 || o.Up > 1 || o.Down <= 0:
		return fmt.Errorf("%w: Up %.2f must be in (0, 1] and Down %.2f above 0", ErrInvalidOptions, o.Up, o.Down)
	case o.DownAfter < 1 || o.UpAfter < 1:
		return fmt.Errorf("%w: DownAfter %d and UpAfter %d must be positive", ErrInvalidOptions, o.DownAfter, o.UpAfter)
	case o.UpLatency < 0 || o.UpLatencyCores < 0 || o.DownLatency < 0:
		return fmt.Errorf("%w: UpLatency %v, UpLatencyCores %.2f and DownLatency %v must not be negative", ErrInvalidOptions, o.UpLatency, o.UpLatencyCores, o.DownLatency)
	}
	return nil
}

// Governor switches GOMAXPROCS between one and Max as the process's load
// goes (see the package documentation). It owns GOMAXPROCS while it runs.
type Governor struct {
	opts Options
	lg   *zap.Logger

	mu      sync.Mutex
	procs   int
	stop    chan struct{}
	done    chan struct{}
	started bool
}

// New returns a governor; Start starts it.
func New(opts Options, lg *zap.Logger) (*Governor, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.applyDefaults()
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Governor{opts: opts, lg: lg, procs: opts.Max, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Start sets one processor and starts sampling the load (a busy process
// is on Max after one Window). With Max 1 there is nothing to govern and
// it does nothing.
func (g *Governor) Start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started || g.opts.Max == 1 {
		return
	}
	g.started = true
	runtime.GOMAXPROCS(1)
	g.procs = 1
	go g.governLoop()
}

// Close stops the governor and leaves GOMAXPROCS at Max.
func (g *Governor) Close() {
	g.mu.Lock()
	started := g.started
	g.started = false
	g.mu.Unlock()
	if !started {
		return
	}
	close(g.stop)
	<-g.done
	g.set(g.opts.Max)
}

// Procs returns the processors the governor has set.
func (g *Governor) Procs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs
}

func (g *Governor) set(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.procs == n {
		return
	}
	runtime.GOMAXPROCS(n)
	g.procs = n
}

// governLoop samples the process's CPU time every Window and switches.
func (g *Governor) governLoop() {
	defer close(g.done)
	tick := time.NewTicker(g.opts.Window)
	defer tick.Stop()
	lastCPU, lastAt := processCPU(), time.Now()
	lat := NewSchedLatency()
	lat.Read()
	quiet := 0 // Windows in a row under Down on Max
	busy := 0  // saturated Windows in a row on one processor
	downAfter := g.opts.DownAfter
	var downAt time.Time
	for {
		select {
		case <-g.stop:
			return
		case now := <-tick.C:
			cpu := processCPU()
			elapsed := now.Sub(lastAt)
			if elapsed <= 0 {
				continue
			}
			cores := float64(cpu-lastCPU) / float64(elapsed)
			lastCPU, lastAt = cpu, now
			wait, _ := lat.Read()
			saturated := cores >= g.opts.Up || cores >= g.opts.UpLatencyCores && wait >= g.opts.UpLatency.Seconds()
			switch procs := g.Procs(); {
			case procs == 1 && !saturated:
				busy = 0
			case procs == 1:
				if busy++; busy < g.opts.UpAfter {
					continue
				}
				g.set(g.opts.Max)
				quiet, busy = 0, 0
				if now.Sub(downAt) < 3*time.Duration(downAfter)*g.opts.Window {
					downAfter = min(2*downAfter, 64*g.opts.DownAfter)
				}
				g.lg.Debug("busy: all processors", zap.Int("procs", g.opts.Max), zap.Float64("cores", cores), zap.Float64("wait_s", wait), zap.Int("next_down_after", downAfter))
			case procs > 1 && cores < g.opts.Down && wait < g.opts.DownLatency.Seconds():
				if quiet++; quiet >= downAfter {
					g.set(1)
					quiet, downAt = 0, now
					g.lg.Debug("quiet: one processor", zap.Float64("cores", cores))
				}
			case procs > 1:
				quiet = 0
			}
		}
	}
}

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
