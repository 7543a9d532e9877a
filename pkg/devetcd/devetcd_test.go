package devetcd

import (
	"context"
	"testing"
	"time"

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
