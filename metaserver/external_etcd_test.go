package metaserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const debianEtcd = "/usr/bin/etcd"

// etcdMember is one /usr/bin/etcd child process.
type etcdMember struct {
	name, client, peer string
	cmd                *exec.Cmd
}

// startEtcdCluster starts a real 3-member cluster of Debian's etcd-server
// on loopback ports, data in t.TempDir().
func startEtcdCluster(t *testing.T) []*etcdMember {
	t.Helper()
	if _, err := os.Stat(debianEtcd); err != nil {
		t.Skipf("%s is absent (apt-get install etcd-server; .ci/run installs it): %v", debianEtcd, err)
	}
	ms := make([]*etcdMember, 3)
	var initial []string
	for i := range ms {
		ms[i] = &etcdMember{name: fmt.Sprintf("m%d", i), client: testutil.ReusableAddr(t), peer: testutil.ReusableAddr(t)}
		initial = append(initial, ms[i].name+"=http://"+ms[i].peer)
	}
	dir := t.TempDir()
	for _, m := range ms {
		m.cmd = exec.Command(debianEtcd,
			"--name", m.name, "--data-dir", filepath.Join(dir, m.name),
			"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
			"--listen-peer-urls", "http://"+m.peer, "--initial-advertise-peer-urls", "http://"+m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "qmq-test",
			"--initial-cluster-state", "new", "--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-level", "error")
		m.cmd.Stderr = os.Stderr
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.cmd.Process.Kill(); _ = m.cmd.Wait() })
	}
	cli := etcdClient(t, endpointsOf(ms))
	eventually(t, 20*time.Second, "the 3-member cluster to elect a leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := cli.Put(ctx, "/qmq-test/ready", "1")
		return err == nil
	})
	return ms
}

func endpointsOf(ms []*etcdMember) []string {
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	return eps
}

func etcdClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestServer_ExternalEtcdClusterSurvivesLosingAMember runs two meta servers
// against a real 3-member cluster of Debian's etcd, SIGKILLs the leader, and
// checks that lookups, registrations, route assignment and admin changes go
// on working.
func TestServer_ExternalEtcdClusterSurvivesLosingAMember(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t)
	eps := endpointsOf(ms)
	a := startServer(t, eps, func(o *Options) { o.EtcdTimeout = 2 * time.Second; o.BrokerTTL = 5 * time.Second })
	b := startServer(t, eps, func(o *Options) { o.EtcdTimeout = 2 * time.Second; o.BrokerTTL = 5 * time.Second })
	c := newClient(t)
	c.mustRegister(a, master("g1", "127.0.0.1:1001"))
	c.mustRegister(b, master("g2", "127.0.0.1:1002"))
	eventually(t, 5*time.Second, "both views hold both groups", func() bool { return len(a.groups()) == 2 && len(b.groups()) == 2 })
	route := c.mustLookup(a, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})

	// Find and kill the leader.
	cli := etcdClient(t, eps)
	var leader *etcdMember
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, m.client)
		cancel()
		if err == nil && st.Header.MemberId == st.Leader {
			leader = m
		}
	}
	if leader == nil {
		t.Fatal("no leader found")
	}
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed leader %s (pid %d)", leader.name, leader.cmd.Process.Pid)
	killed := time.Now()

	// Lookups never stop (they come from the view).
	for _, s := range []*Server{a, b} {
		got := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		if !sameGroups(got.Groups, route.Groups) {
			t.Fatalf("route changed after losing a member: %+v", got.Groups)
		}
	}
	// Writes resume once the survivors elect a leader.
	req := master("g1", "127.0.0.1:1001")
	eventually(t, 15*time.Second, "heartbeats to succeed again", func() bool {
		_, err := c.register(b, req)
		return err == nil
	})
	t.Logf("heartbeats through meta server b work again %v after the kill", time.Since(killed))
	eventually(t, 10*time.Second, "g3 to register through meta server a", func() bool {
		_, err := c.register(a, master("g3", "127.0.0.1:1003"))
		if err != nil && !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("register g3: %v", err)
		}
		return err == nil
	})
	eventually(t, 10*time.Second, "g3 seen by both meta servers", func() bool { return len(a.groups()) == 3 && len(b.groups()) == 3 })
	// A new subject gets a route. The write may meet a client connection
	// still pointed at the dead member and time out; the meta server then
	// answers "unavailable" and clients ask again, as this loop does.
	var fresh protocol.LookupResponse
	eventually(t, 10*time.Second, "a route for a new subject", func() bool {
		var err error
		fresh, err = c.lookup(b, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "after-loss"})
		if err != nil && !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("lookup after the loss: %v", err)
		}
		return err == nil
	})
	if len(fresh.Groups) != 2 {
		t.Fatalf("route assigned after the loss: %+v", fresh.Groups)
	}
	eventually(t, 5*time.Second, "a to see the new route", func() bool { return len(a.routes("after-loss")) == 1 })
	eventually(t, 10*time.Second, "an admin change after the loss", func() bool {
		_, err := admin(a, testToken).MarkReadonly(context.Background(), "g3", "")
		if err != nil && !errors.Is(err, &api.HTTPError{Status: 503}) {
			t.Fatalf("admin change after the loss: %v", err)
		}
		return err == nil
	})
	eventually(t, 5*time.Second, "both meta servers ready", func() bool {
		base := func(s *Server) string { return httpGet(t, "http://"+s.HTTPAddr().String()+"/readyz") }
		return strings.HasPrefix(base(a), "ok") && strings.HasPrefix(base(b), "ok")
	})
}
