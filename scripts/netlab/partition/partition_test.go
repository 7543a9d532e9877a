package partition

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/qmq-go/qmq/scripts/netlab"
)

// clientEnv makes this test binary the client program (TestMain).
const clientEnv = "QMQ_PARTITION_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) == "1" {
		if err := ClientMain(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A realtime group (master and slave, --wait-slave) under produce and
// consume load, its master cut from its slave and then from the meta
// server and etcd (the client still reaching it), each for 3 s: nothing
// acknowledged is lost, no two masters take writes at once, and after
// each heal the group acknowledges writes again at once and pairs again.
func TestPartitionMasterCuts(t *testing.T) {
	if err := netlab.Supported(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	bin := t.TempDir()
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin+"/",
		"github.com/qmq-go/qmq/metaserver/cmd/qmq-metaserver", "github.com/qmq-go/qmq/realtime/cmd/qmq-realtime")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := time.Now()
	res, err := Run(Options{
		Bin: bin, Dir: dir,
		Client: []string{self}, ClientEnv: []string{clientEnv + "=1"},
		Scenarios: []string{"master-slave", "master-meta"},
		Hold:      3 * time.Second, Warmup: time.Second, DrainTimeout: 30 * time.Second,
		Logf: t.Logf,
	})
	if errors.Is(err, netlab.ErrUnsupported) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, dir)
	}
	t.Logf("took %v; %d acknowledged, failed sends %v", time.Since(start).Round(time.Millisecond), res.Acked, res.FailedSends)
	for _, s := range res.Scenarios {
		if s.Err != nil {
			t.Errorf("%s: %v", s.Name, s.Err)
		}
		// Generous for a loaded machine: the bench's target is 2 s.
		if d := s.Slowest(); d > 10*time.Second {
			t.Errorf("%s: the group acknowledged its first write %v after the heal", s.Name, d)
		}
	}
	if res.Acked == 0 {
		t.Error("nothing acknowledged")
	}
	if res.LostAcked != 0 {
		t.Errorf("%d acknowledged messages lost", res.LostAcked)
	}
	if res.DualMasterAcks != 0 {
		t.Errorf("%d writes acknowledged by two masters at once", res.DualMasterAcks)
	}
}
