package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// Workers are load generators the suites run as child processes, so that
// our clients, like the peers' bench tools, run in a process of their own
// (with GOMAXPROCS=1, as reference/peers.md runs bench_writer and
// bench_reader). A worker prints one line "result <json>".
var workers = map[string]func(args []string) (any, error){}

func registerWorker(name string, fn func(args []string) (any, error)) { workers[name] = fn }

// runWorkerMode runs a worker when the binary was started as one; it reports
// whether it did.
func runWorkerMode() bool {
	if len(os.Args) < 3 || os.Args[1] != "worker" {
		return false
	}
	fn := workers[os.Args[2]]
	if fn == nil {
		fmt.Fprintf(os.Stderr, "qmqbench: unknown worker %q\n", os.Args[2])
		os.Exit(2)
	}
	if path := os.Getenv("QMQ_BENCH_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if path := os.Getenv("QMQ_BENCH_MEMPROFILE"); path != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			if f, err := os.Create(path); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	res, err := fn(os.Args[3:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "qmqbench worker %s: %v\n", os.Args[2], err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	fmt.Printf("result %s\n", b)
	return true
}

// runWorker starts this binary as a worker on one core (GOMAXPROCS=1, as
// the peers' bench tools run) and decodes its result into out.
func runWorker(name string, out any, args ...string) error {
	return runWorkerProcs(name, 1, out, args...)
}

// runWorkerProcs is runWorker with GOMAXPROCS=procs (0: the Go default).
func runWorkerProcs(name string, procs int, out any, args ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{"worker", name}, args...)...)
	cmd.Env = os.Environ()
	if procs > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", procs))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("worker %s: %w: %s", name, err, tail(stderr.String()))
	}
	for _, line := range strings.Split(string(stdout), "\n") {
		if rest, ok := strings.CutPrefix(line, "result "); ok {
			return json.Unmarshal([]byte(rest), out)
		}
	}
	return fmt.Errorf("worker %s printed no result: %s", name, tail(string(stdout)+stderr.String()))
}

// rateResult is what throughput workers report.
type rateResult struct {
	Messages int64         `json:"messages"`
	Failed   int64         `json:"failed"`
	Elapsed  time.Duration `json:"elapsed"`
}

func (r rateResult) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}
