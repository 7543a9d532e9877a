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
	var etcdAdvertise embeddedEtcdAdvertise
	fs.StringVar(&etcdAdvertise.client, "etcd-advertise", "", "client address the embedded etcd advertises (default --etcd-listen; required when that listens on all interfaces)")
	fs.StringVar(&etcdAdvertise.peer, "etcd-advertise-peer", "", "peer address the embedded etcd advertises (default --etcd-peer; required when that listens on all interfaces)")
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
			if err := opts.Validate(); err != nil {
				return err
			}
			if len(opts.EtcdEndpoints) > 0 {
				return nil
			}
			for _, a := range []string{*etcdClient, *etcdPeer} {
				if err := exposure.Check(a, opts.TLS.Cert != "", opts.TLS.CA != "", opts.Insecure); err != nil {
					return fmt.Errorf("embedded etcd: %w", err)
				}
			}
			if err := exposure.CheckAdvertise(*etcdClient, etcdAdvertise.client, "--etcd-advertise"); err != nil {
				return fmt.Errorf("embedded etcd: %w", err)
			}
			if err := exposure.CheckAdvertise(*etcdPeer, etcdAdvertise.peer, "--etcd-advertise-peer"); err != nil {
				return fmt.Errorf("embedded etcd: %w", err)
			}
			return embeddedEtcd(opts, *etcdClient, *etcdPeer, etcdAdvertise).Validate()
		},
		Run: func() error { return run(opts, *etcdClient, *etcdPeer, etcdAdvertise) },
	}.Main()
}

// embeddedEtcd is the embedded etcd's configuration: its data under
// <data-dir>/etcd, served with the meta server's TLS files (and only to
// clients whose certificate the CA signed) when it has them.
func embeddedEtcd(opts metaserver.Options, client, peer string, advertise embeddedEtcdAdvertise) devetcd.Options {
	eo := devetcd.Options{Dir: filepath.Join(opts.DataDir, "etcd"), ClientAddr: client, PeerAddr: peer,
		ClientAdvertise: advertise.client, PeerAdvertise: advertise.peer}
	if f := opts.TLS; f.Cert != "" {
		t := devetcd.TLS{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: f.CA != ""}
		eo.ClientTLS, eo.PeerTLS = t, t
	}
	return eo
}

// embeddedEtcdAdvertise holds the addresses the embedded etcd advertises.
type embeddedEtcdAdvertise struct{ client, peer string }

func run(opts metaserver.Options, etcdClient, etcdPeer string, advertise embeddedEtcdAdvertise) error {
	lg, _, err := logging.New(opts.Log)
	if err != nil {
		return err
	}
	defer func() { _ = lg.Sync() }()

	if len(opts.EtcdEndpoints) == 0 {
		eo := embeddedEtcd(opts, etcdClient, etcdPeer, advertise)
		if f := opts.TLS; f.Cert != "" && opts.EtcdTLS.IsZero() {
			opts.EtcdTLS = f
		}
		e, err := devetcd.Start(eo, lg)
		if err != nil {
			return err
		}
		defer e.Close()
		opts.EtcdEndpoints = e.Endpoints()
		lg.Info("embedded etcd started", zap.String("dir", eo.Dir), zap.Strings("endpoints", opts.EtcdEndpoints))
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
