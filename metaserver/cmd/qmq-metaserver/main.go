// Command qmq-metaserver runs a meta server. Without --etcd-endpoints it
// starts an embedded single-node etcd with its data under --data-dir, so one
// process is a whole control plane on one host.
//
// Secrets never come from the command line: the admin token (identity
// admin) from QMQ_ADMIN_TOKEN or --admin-token-file (default
// <data-dir>/admin-token, generated there with mode 0600 when missing), the
// credentials the server presents to brokers from QMQ_CREDENTIALS or
// --credentials-file. With --tls-cert and --tls-key every listener serves
// TLS only: TCP, HTTP and the embedded etcd's client and peer ports (etcd
// with client-certificate auth when --tls-ca is given). Flags, the YAML
// file given with --config and QMQ_* environment variables share names
// (pkg/config).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/logging"
	"go.uber.org/zap"
)

func main() {
	if err := metaserver.RefuseSecretArgs(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "qmq-metaserver:", err)
		os.Exit(config.ExitUsage)
	}
	opts := metaserver.NewOptions()
	fs := flag.NewFlagSet("qmq-metaserver", flag.ContinueOnError)
	opts.AddFlags(fs)
	etcdClient := fs.String("etcd-listen", "127.0.0.1:2379", "client address of the embedded etcd (without --etcd-endpoints)")
	etcdPeer := fs.String("etcd-peer", "127.0.0.1:2380", "peer address of the embedded etcd")
	config.Server{
		Name:     "qmq-metaserver",
		Short:    "qmq-metaserver runs a meta server: routes, broker registry, failover and the admin console.",
		Flags:    fs,
		Reserved: []string{metaserver.EnvAdminToken, metaserver.EnvCredentials},
		Prepare: func() error {
			if err := opts.FromEnvironment(os.Getenv); err != nil {
				return err
			}
			if opts.AdminToken == "" && opts.AdminTokenFile == "" {
				opts.AdminTokenFile = metaserver.DefaultAdminTokenFile(opts.DataDir)
			}
			return opts.Validate()
		},
		Run: func() error { return run(opts, *etcdClient, *etcdPeer) },
	}.Main()
}

func run(opts metaserver.Options, etcdClient, etcdPeer string) error {
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Sync() }()

	if len(opts.EtcdEndpoints) == 0 {
		for _, a := range []string{etcdClient, etcdPeer} {
			if err := exposure.Check(a, opts.TLS.Cert != "", opts.TLS.CA != "", opts.Insecure); err != nil {
				return fmt.Errorf("embedded etcd: %w", err)
			}
		}
		dir := filepath.Join(opts.DataDir, "etcd")
		eo := devetcd.Options{Dir: dir, ClientAddr: etcdClient, PeerAddr: etcdPeer}
		if f := opts.TLS; f.Cert != "" {
			// The embedded etcd serves with the meta server's files, and
			// only to clients whose certificate the CA signed.
			t := devetcd.TLS{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: f.CA != ""}
			eo.ClientTLS, eo.PeerTLS = t, t
			if opts.EtcdTLS.IsZero() {
				opts.EtcdTLS = f
			}
		}
		e, err := devetcd.Start(eo, lg)
		if err != nil {
			return err
		}
		defer e.Close()
		opts.EtcdEndpoints = e.Endpoints()
		lg.Info("embedded etcd started", zap.String("dir", dir), zap.Strings("endpoints", opts.EtcdEndpoints))
	}
	s, err := metaserver.New(opts, lg)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	tokenFrom := metaserver.EnvAdminToken
	if opts.AdminTokenFile != "" && os.Getenv(metaserver.EnvAdminToken) == "" {
		tokenFrom = opts.AdminTokenFile
	}
	fmt.Printf("qmq-metaserver: tcp %s, console http://%s/, admin token from %s\n", s.Addr(), s.HTTPAddr(), tokenFrom)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Close(ctx)
}
