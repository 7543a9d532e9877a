package devetcd

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestStart_ServesClientsAndRestartsWithData(t *testing.T) {
	dir := t.TempDir()
	e, err := Start(Options{Dir: dir, Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(e *Etcd, k, v string) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if v != "" {
			if _, err := cli.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
			return
		}
		r, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v1" {
			t.Fatalf("after restart %s = %v, want v1", k, r.Kvs)
		}
	}
	put(e, "/k", "v1")
	e.Close()
	e.Close() // idempotent

	e2, err := Start(Options{Dir: dir, Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	put(e2, "/k", "")
}

func TestOptions_Validate(t *testing.T) {
	if err := (Options{}).Validate(); err == nil {
		t.Fatal("empty Dir accepted")
	}
}

func TestStart_TLSWithClientCertAuth(t *testing.T) {
	ca := testutil.NewCA(t)
	server := ca.Issue(t, testutil.CertOptions{Name: "etcd", Hosts: []string{"127.0.0.1", "localhost"}})
	client := ca.Issue(t, testutil.CertOptions{Name: "meta", Client: true})
	stranger := testutil.NewCA(t).Issue(t, testutil.CertOptions{Name: "stranger", Client: true})
	tlsOpts := TLS{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.CAFile, ClientCertAuth: true}
	e, err := Start(Options{Dir: t.TempDir(), Fast: true, ClientTLS: tlsOpts, PeerTLS: tlsOpts}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	testutil.RequirePrivateTree(t, e.e.Config().Dir)
	try := func(cfg *tls.Config) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: time.Second, TLS: cfg, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = cli.Put(ctx, "/k", "v")
		return err
	}
	if err := try(ca.ClientConfig(&client)); err != nil {
		t.Fatalf("client with a certificate the CA signed: %v", err)
	}
	if err := try(ca.ClientConfig(nil)); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := try(ca.ClientConfig(&stranger)); err == nil {
		t.Fatal("a client whose certificate another CA signed was served")
	}
	if err := try(nil); err == nil {
		t.Fatal("a plaintext client was served on the TLS port")
	}
}

func TestOptions_ValidateTLS(t *testing.T) {
	for _, o := range []Options{
		{Dir: "d", ClientTLS: TLS{KeyFile: "k"}},
		{Dir: "d", ClientTLS: TLS{CertFile: "c"}},
		{Dir: "d", PeerTLS: TLS{CertFile: "c", KeyFile: "k", ClientCertAuth: true}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
