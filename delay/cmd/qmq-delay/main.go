// Command qmq-delay runs a delay server: the master (--role master, the
// default) or the slave (--role slave) of one delay group. Flags, the YAML
// file given with --config and QMQ_* environment variables share names
// (pkg/config).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/secure"
	"github.com/qmq-go/qmq/pkg/tracing/otlp"
	"go.uber.org/zap"
)

func main() {
	opts := delay.NewOptions()
	fs := flag.NewFlagSet("qmq-delay", flag.ContinueOnError)
	opts.AddFlags(fs)
	gcPercent := fs.Int("gc-percent", 25, "GOGC of the process: its big heap (the indexes of pending messages) holds no pointers and is cheap to mark, so collecting more often costs little CPU and keeps the resident memory near the live heap (ignored when GOGC is set)")
	gcHeadroom := fs.Int("gc-min-headroom-mb", 32, "the least the heap may grow past the live heap before the collector runs (MiB): --gc-percent is raised while the live heap is small, so that a small heap is not collected every few megabytes allocated (0: --gc-percent alone; ignored when GOGC is set)")
	config.Server{
		Name:     "qmq-delay",
		Short:    "qmq-delay runs a delay server: the master or the slave of one delay group.",
		Flags:    fs,
		Reserved: []string{secure.EnvCredentials},
		Prepare: func() error {
			if err := opts.Secure.FromEnvironment(os.Getenv); err != nil {
				return err
			}
			return opts.Validate()
		},
		Run: func() error { return run(opts, *gcPercent, *gcHeadroom) },
	}.Main()
}

func run(opts delay.Options, gcPercent, gcHeadroomMB int) error {
	if os.Getenv("GOGC") == "" {
		startGCFloor(gcPercent, uint64(max(gcHeadroomMB, 0))<<20)
	}
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Sync() }()
	tp, stopTracing, err := otlp.FromEnvironment(context.Background())
	if err != nil {
		lg.Error("cannot set up tracing from OTEL_* variables", zap.Error(err))
		return err
	}
	defer stopTracing(context.Background())
	opts.TracerProvider = tp
	s, err := delay.New(opts, nil, nil, lg)
	if err != nil {
		lg.Error("cannot open delay server", zap.Error(err))
		return err
	}
	if err := s.Start(); err != nil {
		lg.Error("cannot start delay server", zap.Error(err))
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		lg.Error("unclean shutdown", zap.Error(err))
		return err
	}
	return nil
}
