// Command qmq-realtime runs a realtime broker of one broker group: its
// master or its slave, switching roles on failover when it registers with
// meta servers (pkg/failover). Flags override the YAML file given with
// --config.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/procs"
	"github.com/qmq-go/qmq/pkg/tracing/otlp"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
)

func main() {
	opts := realtime.NewOptions()
	fs := flag.NewFlagSet("qmq-realtime", flag.ExitOnError)
	opts.AddFlags(fs)
	adaptive := fs.Bool("adaptive-procs", true, "size GOMAXPROCS to the load: one processor while one keeps up, all of them when it is saturated (pkg/procs; ignored when GOMAXPROCS is set)")
	if err := config.Parse(fs, os.Args[1:], &opts); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-realtime:", err)
		os.Exit(2)
	}
	if err := opts.Secure.FromEnvironment(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-realtime:", err)
		os.Exit(2)
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-realtime:", err)
		os.Exit(2)
	}
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "qmq-realtime:", err)
		os.Exit(2)
	}
	defer lg.Sync()
	tp, stopTracing, err := otlp.FromEnvironment(context.Background())
	if err != nil {
		lg.Fatal("cannot set up tracing from OTEL_* variables", zap.Error(err))
	}
	defer stopTracing(context.Background())
	opts.TracerProvider = tp
	b, err := realtime.New(opts, lg)
	if err != nil {
		lg.Fatal("cannot open broker", zap.Error(err))
	}
	if err := b.Start(); err != nil {
		lg.Fatal("cannot start broker", zap.Error(err))
	}
	if *adaptive && os.Getenv("GOMAXPROCS") == "" {
		gov, err := procs.New(procs.Options{}, lg.Named("procs"))
		if err != nil {
			lg.Fatal("cannot size processors", zap.Error(err))
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
		os.Exit(1)
	}
}
