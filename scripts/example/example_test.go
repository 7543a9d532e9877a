package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/realtime"
)

// startCluster starts what scripts/run-local.sh starts, in this process: a
// meta server on an embedded etcd, two realtime groups and a delay group,
// all registered through the meta server. It returns the meta server's TCP
// address once the meta server lists the three groups.
func startCluster(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	mo := metaserver.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.EtcdEndpoints, mo.AdminToken, mo.MinGroups = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints(), "t", 2
	ms, err := metaserver.New(mo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close(ctx) })
	meta := ms.Addr().String()
	for _, g := range []string{"rt1", "rt2"} {
		o := realtime.NewOptions()
		o.Group, o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = g, "127.0.0.1:0", "", t.TempDir(), 8<<20
		o.MetaServers = []string{meta}
		b, err := realtime.New(o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close(ctx) })
	}
	do := delay.NewOptions()
	do.Group, do.Addr, do.HTTPAddr, do.DataDir, do.MetaServers = "dl1", "127.0.0.1:0", "", t.TempDir(), []string{meta}
	ds, err := delay.New(do, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Close(ctx) })
	admin := api.NewClient(ms.HTTPAddr().String(), "t", 2*time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if gs, err := admin.Groups(ctx); err == nil && len(gs) == 3 {
			return meta
		}
		if time.Now().After(deadline) {
			t.Fatal("the meta server never listed rt1, rt2 and dl1")
		}
	}
}

// TestExample_ReceivesBothMessages runs the example against a fresh cluster:
// the consumer group is new when the first message is sent, and the example
// still receives both messages (it used to sleep to let the group exist).
func TestExample_ReceivesBothMessages(t *testing.T) {
	meta := startCluster(t)
	if err := run(meta, "example.test", time.Second, tlsconfig.Files{}, ""); err != nil {
		t.Fatal(err)
	}
}

// TestREADME_GoProgramRuns builds README's Go program as it stands in the
// README and runs it against a fresh cluster named by QMQ_META: it must print
// both messages it sends.
func TestREADME_GoProgramRuns(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)\n```go\n(package main\n.*?)```\n").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README has no Go program (a go block starting with package main)")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), block[1], 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "readme")
	build := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("README's Go program does not build: %v\n%s", err, out)
	}
	meta := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "QMQ_META="+meta)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("README's Go program: %v\n%s", err, out.String())
	}
	for _, want := range []string{`received "order 42 paid"`, `received "order 42 reminder"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("README's Go program printed %q, want a line with %s", out.String(), want)
		}
	}
}
