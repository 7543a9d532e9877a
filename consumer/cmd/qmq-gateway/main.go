// Command qmq-gateway runs an HTTP gateway to a QMQ-Go cluster
// (consumer/gateway): publish, long-poll pull, ack and nack over HTTP/1.1
// and JSON, described at /openapi.json. Flags override the YAML file given
// with --config.
package main

import (
	"context"
	"flag"
	"fmt"
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
	fs := flag.NewFlagSet("qmq-gateway", flag.ExitOnError)
	opts.AddFlags(fs)
	gcPercent := fs.Int("gc-percent", 400, "GOGC of the process: the gateway's garbage is short-lived request data, and the default 100 spent a tenth of its CPU collecting it (ignored when GOGC is set)")
	if err := config.Parse(fs, os.Args[1:], &opts); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-gateway:", err)
		os.Exit(2)
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-gateway:", err)
		os.Exit(2)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*gcPercent)
	}
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "qmq-gateway:", err)
		os.Exit(2)
	}
	defer lg.Sync()
	g, err := gateway.New(opts, lg)
	if err != nil {
		lg.Fatal("cannot build gateway", zap.Error(err))
	}
	if err := g.Start(); err != nil {
		lg.Fatal("cannot start gateway", zap.Error(err))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		lg.Error("unclean shutdown", zap.Error(err))
		os.Exit(1)
	}
}
