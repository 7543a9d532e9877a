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

	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/scripts/localcluster"
)

// startCluster starts what scripts/run-local.sh starts, in this process,
// and returns the meta server's TCP address.
func startCluster(t *testing.T) string {
	t.Helper()
	c, err := localcluster.Start(localcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.MetaAddr()
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
