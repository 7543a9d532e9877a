// Command qmq-delay runs a delay server: the master (--role master, the
// default) or the slave (--role slave) of one delay group.
// Flags override the YAML file given with --config.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/logging"
	"go.uber.org/zap"
)

func main() {
	opts := delay.NewOptions()
	fs := flag.NewFlagSet("qmq-delay", flag.ExitOnError)
	opts.AddFlags(fs)
	if err := config.Parse(fs, os.Args[1:], &opts); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-delay:", err)
		os.Exit(2)
	}
	if err := opts.Secure.FromEnvironment(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-delay:", err)
		os.Exit(2)
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-delay:", err)
		os.Exit(2)
	}
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "qmq-delay:", err)
		os.Exit(2)
	}
	defer lg.Sync()
	s, err := delay.New(opts, nil, nil, lg)
	if err != nil {
		lg.Fatal("cannot open delay server", zap.Error(err))
	}
	if err := s.Start(); err != nil {
		lg.Fatal("cannot start delay server", zap.Error(err))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		lg.Error("unclean shutdown", zap.Error(err))
		os.Exit(1)
	}
}
