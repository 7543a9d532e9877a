// Command qmqbench runs the benchmark suites behind scripts/bench.sh. Each
// suite lives in its own file and registers itself in init with register.
// A suite measures QMQ-Go and, where the issue names one, its peer or the
// machine's limit in the same run, and prints one line per figure:
//
//	metric <name> <value> <unit>
//
// Usage: qmqbench [-dir DIR] [-peers DIR] SUITE...
//
// A worker process (qmqbench worker NAME ARGS...) writes a CPU profile to
// $QMQ_BENCH_CPUPROFILE and an allocation profile (every 4 KiB sampled) to
// $QMQ_BENCH_MEMPROFILE when they are set, for go tool pprof.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Env is what a suite gets: a scratch directory it owns, the folder where
// peer binaries were built (scripts/peers/bin), and Metric for its output.
type Env struct {
	// Dir is an empty scratch directory on the machine's disk, removed after
	// the run's last suite unless -keep is set.
	Dir string
	// PeersBin holds peer binaries (nsqd, nats-server, …) built by
	// scripts/peers/build.sh; empty when not built.
	PeersBin string
	// Bin holds the project's own binaries (qmq-realtime, …) built by
	// scripts/bench.sh.
	Bin string

	probe *syncProbe // the run's fdatasync probe (settleRound waits on it)
}

// Metric prints one figure in the format scripts/bench.sh promises.
func (e *Env) Metric(name string, value float64, unit string) {
	if value >= 1000 || value == float64(int64(value)) {
		fmt.Printf("metric %s %.0f %s\n", name, value, unit)
		return
	}
	fmt.Printf("metric %s %.3f %s\n", name, value, unit)
}

// Logf prints a progress note to stderr.
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# "+format+"\n", args...)
}

type suite struct {
	name string
	run  func(*Env) error
}

var suites = map[string]suite{}

// register adds a suite; it panics on a duplicate name.
func register(name string, run func(*Env) error) {
	if _, dup := suites[name]; dup {
		panic("qmqbench: duplicate suite " + name)
	}
	suites[name] = suite{name: name, run: run}
}

func main() {
	if runWorkerMode() {
		os.Exit(0)
	}
	dir := flag.String("dir", "", "scratch directory root (default: a new temporary directory)")
	peers := flag.String("peers", "", "directory of peer binaries")
	bin := flag.String("bin", "bin", "directory of the project's binaries")
	keep := flag.Bool("keep", false, "keep the scratch directory")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintf(os.Stderr, "usage: qmqbench SUITE...\nsuites: %s\n", strings.Join(names(), " "))
		os.Exit(2)
	}
	// Scratch directories are removed after the last suite, not after
	// each: on a file system mounted with discard, deleting a suite's
	// preallocated gigabytes issues their discards, and on the VM the
	// suites were tuned on the disk then stalled for ~100 ms every two
	// seconds or so for several seconds after (the latency suite's p99 read
	// 78 ms right after such a cleanup, 7.5 ms once it had settled).
	var scratches []string
	var probe *syncProbe
	removeScratches := func() {
		if probe != nil {
			probe.close()
		}
		if !*keep {
			for _, d := range scratches {
				os.RemoveAll(d)
			}
		}
	}
	settleDisks(time.Second, 20*time.Second)
	probeDir, err := os.MkdirTemp(*dir, "qmqbench-probe-")
	if err == nil {
		scratches = append(scratches, probeDir)
		probe, err = newSyncProbe(filepath.Join(probeDir, "probe"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "qmqbench: fdatasync probe:", err)
		removeScratches()
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "# disk: a quiet second's %v before each suite\n", probe)
	for _, name := range flag.Args() {
		s, ok := suites[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "qmqbench: unknown suite %q (have: %s)\n", name, strings.Join(names(), " "))
			os.Exit(2)
		}
		scratch, err := os.MkdirTemp(*dir, "qmqbench-"+name+"-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "qmqbench:", err)
			removeScratches()
			os.Exit(1)
		}
		scratches = append(scratches, scratch)
		env := &Env{Dir: scratch, PeersBin: *peers, Bin: *bin, probe: probe}
		if waited, quiet := settleDisks(time.Second, 20*time.Second); !quiet {
			env.Logf("disks still busy after %v of waiting before %s", waited.Round(time.Millisecond), name)
		} else if waited > 2*time.Second {
			env.Logf("waited %v for the disks to go quiet before %s", waited.Round(time.Millisecond), name)
		}
		if err := env.settleSync("before "+name, 60*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "qmqbench: fdatasync probe:", err)
			removeScratches()
			os.Exit(1)
		}
		before, measured := readCPUTimes()
		err = s.run(env)
		if after, ok := readCPUTimes(); measured && ok {
			env.Logf("cpu during %s: %s", name, cpuSplit(before, after))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "qmqbench: suite %s: %v\n", name, err)
			removeScratches()
			os.Exit(1)
		}
	}
	removeScratches()
}

func names() []string {
	out := make([]string, 0, len(suites))
	for n := range suites {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
