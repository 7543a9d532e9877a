// Package localcluster starts a whole QMQ-Go cluster inside the calling
// process, on loopback ports chosen by the kernel: a meta server on an
// embedded etcd, realtime broker groups rt1…rtN and a delay group dl1, all
// registered through the meta server, as scripts/run-local.sh starts them as
// processes. Examples and tests use it to run client code exactly as a user
// would write it against run-local (only the meta server's address differs).
//
// Brokers use 8 MiB segments (no preallocated gigabyte) and no HTTP ports;
// the meta server has an HTTP admin port and the admin token "local".
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
)

// AdminToken is the meta server's admin token.
const AdminToken = "local"

// Options say what to start. The zero value starts two realtime groups and
// a delay group under a new temporary directory.
type Options struct {
	// Dir holds every server's data; empty: a new temporary directory that
	// Close removes.
	Dir string
	// RealtimeGroups is how many realtime groups to start (default 2).
	RealtimeGroups int
	// NoDelay starts no delay group.
	NoDelay bool
	// Ready bounds the wait until the meta server lists every group
	// (default 30 s).
	Ready time.Duration
	// Logger receives every server's log (default none).
	Logger *zap.Logger
}

// Cluster is a running cluster; Close stops it.
type Cluster struct {
	etcd    *devetcd.Etcd
	meta    *metaserver.Server
	brokers []*realtime.Broker
	delay   *delay.Server
	tempDir string
}

// Start starts a cluster and returns once the meta server lists every
// group.
func Start(o Options) (_ *Cluster, err error) {
	if o.RealtimeGroups == 0 {
		o.RealtimeGroups = 2
	}
	if o.Ready == 0 {
		o.Ready = 30 * time.Second
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "qmq-localcluster-"); err != nil {
			return nil, err
		}
		c.tempDir = o.Dir
	}
	if c.etcd, err = devetcd.Start(devetcd.Options{Dir: filepath.Join(o.Dir, "etcd"), Fast: true}, nil); err != nil { // etcd's own log stays out
		return nil, fmt.Errorf("localcluster: etcd: %w", err)
	}
	mo := metaserver.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.EtcdEndpoints, mo.AdminToken = "127.0.0.1:0", "127.0.0.1:0", c.etcd.Endpoints(), AdminToken
	mo.MinGroups = o.RealtimeGroups
	if c.meta, err = metaserver.New(mo, o.Logger); err != nil {
		return nil, fmt.Errorf("localcluster: meta server: %w", err)
	}
	if err = c.meta.Start(); err != nil {
		c.meta = nil
		return nil, fmt.Errorf("localcluster: meta server: %w", err)
	}
	metas := []string{c.MetaAddr()}
	for i := 1; i <= o.RealtimeGroups; i++ {
		ro := realtime.NewOptions()
		ro.Group, ro.Addr, ro.HTTPAddr = fmt.Sprintf("rt%d", i), "127.0.0.1:0", ""
		ro.DataDir, ro.SegmentSize, ro.MetaServers = filepath.Join(o.Dir, ro.Group), 8<<20, metas
		b, err := realtime.New(ro, o.Logger)
		if err != nil {
			return nil, fmt.Errorf("localcluster: %s: %w", ro.Group, err)
		}
		if err := b.Start(); err != nil {
			return nil, fmt.Errorf("localcluster: %s: %w", ro.Group, err)
		}
		c.brokers = append(c.brokers, b)
	}
	groups := o.RealtimeGroups
	if !o.NoDelay {
		do := delay.NewOptions()
		do.Group, do.Addr, do.HTTPAddr, do.DataDir, do.MetaServers = "dl1", "127.0.0.1:0", "", filepath.Join(o.Dir, "dl1"), metas
		d, err := delay.New(do, nil, nil, o.Logger)
		if err != nil {
			return nil, fmt.Errorf("localcluster: dl1: %w", err)
		}
		if err := d.Start(); err != nil {
			return nil, fmt.Errorf("localcluster: dl1: %w", err)
		}
		c.delay = d
		groups++
	}
	admin := api.NewClient(c.MetaHTTPAddr(), AdminToken, 2*time.Second)
	for deadline := time.Now().Add(o.Ready); ; time.Sleep(20 * time.Millisecond) {
		if gs, err := admin.Groups(context.Background()); err == nil && len(gs) == groups {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("localcluster: the meta server did not list all %d groups within %v", groups, o.Ready)
		}
	}
}

// MetaAddr is the meta server's TCP address, what clients are given
// (QMQ_META; run-local's 127.0.0.1:20880).
func (c *Cluster) MetaAddr() string { return c.meta.Addr().String() }

// MetaHTTPAddr is the meta server's HTTP admin address (qmqctl --meta-http).
func (c *Cluster) MetaHTTPAddr() string { return c.meta.HTTPAddr().String() }

// Close stops every server (the brokers first) and removes a temporary
// directory Start made.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if c.delay != nil {
		errs = append(errs, c.delay.Close(ctx))
	}
	for i := len(c.brokers) - 1; i >= 0; i-- {
		errs = append(errs, c.brokers[i].Close(ctx))
	}
	if c.meta != nil {
		errs = append(errs, c.meta.Close(ctx))
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	if c.tempDir != "" {
		errs = append(errs, os.RemoveAll(c.tempDir))
	}
	return errors.Join(errs...)
}
