// Command qmq-gateway runs an HTTP gateway to a QMQ-Go cluster
// (consumer/gateway): publish, long-poll pull, ack and nack over HTTP/1.1
// and JSON, described at /openapi.json. Flags, the YAML file given with
// --config and QMQ_* environment variables share names (pkg/config).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/consumer/gateway"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/logging"
)

func main() {
	opts := gateway.NewOptions()
	fs := flag.NewFlagSet("qmq-gateway", flag.ContinueOnError)
	opts.AddFlags(fs)
	gcPercent := fs.Int("gc-percent", 400, "GOGC of the process: the gateway's garbage is short-lived request data, and the default 100 spent a tenth of its CPU collecting it (ignored when GOGC is set)")
	config.Server{
		Name:    "qmq-gateway",
		Short:   "qmq-gateway serves publish, pull, ack and nack over HTTP/1.1 and JSON to a QMQ-Go cluster.",
		Flags:   fs,
		Prepare: opts.Validate,
		Run:     func() error { return run(opts, *gcPercent) },
	}.Main()
}

func run(opts gateway.Options, gcPercent int) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Sync() }()
	g, err := gateway.New(opts, lg)
	if err != nil {
		lg.Error("cannot build gateway", zap.Error(err))
		return err
	}
	if err := g.Start(); err != nil {
		lg.Error("cannot start gateway", zap.Error(err))
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		lg.Error("unclean shutdown", zap.Error(err))
		return err
	}
	return nil
}
