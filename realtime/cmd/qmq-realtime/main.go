// Command qmq-realtime runs a realtime broker of one broker group: its
// master or its slave, switching roles on failover when it registers with
// meta servers (pkg/failover). Flags, the YAML file given with --config and
// QMQ_* environment variables share names (pkg/config).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/procs"
	"github.com/qmq-go/qmq/pkg/secure"
	"github.com/qmq-go/qmq/pkg/tracing/otlp"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
)

func main() {
	opts := realtime.NewOptions()
	fs := flag.NewFlagSet("qmq-realtime", flag.ContinueOnError)
	opts.AddFlags(fs)
	adaptive := fs.Bool("adaptive-procs", true, "size GOMAXPROCS to the load: one processor while one keeps up, all of them when it is saturated (pkg/procs; ignored when GOMAXPROCS is set)")
	config.Server{
		Name:     "qmq-realtime",
		Short:    "qmq-realtime runs a realtime broker: the master or a slave of one broker group.",
		Flags:    fs,
		Reserved: []string{secure.EnvCredentials},
		Prepare: func() error {
			if err := opts.Secure.FromEnvironment(os.Getenv); err != nil {
				return err
			}
			return opts.Validate()
		},
		Run: func() error { return run(opts, *adaptive) },
	}.Main()
}

func run(opts realtime.Options, adaptive bool) error {
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
	b, err := realtime.New(opts, lg)
	if err != nil {
		lg.Error("cannot open broker", zap.Error(err))
		return err
	}
	if err := b.Start(); err != nil {
		lg.Error("cannot start broker", zap.Error(err))
		return err
	}
	if adaptive && os.Getenv("GOMAXPROCS") == "" {
		gov, err := procs.New(procs.Options{}, lg.Named("procs"))
		if err != nil {
			lg.Error("cannot size processors", zap.Error(err))
			return err
		}
		gov.Start()
		defer gov.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		lg.Error("unclean shutdown", zap.Error(err))
		return err
	}
	return nil
}
