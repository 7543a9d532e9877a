package gateway_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer/gateway"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// A gateway process killed (SIGKILL) while it holds pulled, un-acked
// messages: they go back to the group after the brokers' consumer timeout,
// and a consumer of the group on another gateway gets every one of them.
func TestGateway_KilledMidPull(t *testing.T) {
	const brokerTimeout = 3 * time.Second
	cl := startCluster(t, brokerTimeout, nil)
	bin := filepath.Join(t.TempDir(), "qmq-gateway")
	build := exec.Command("go", "build", "-o", bin, "github.com/qmq-go/qmq/consumer/cmd/qmq-gateway")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := testutil.ReusableAddr(t)
	proc := exec.Command(bin, "--addr", addr, "--meta", cl.meta.Addr().String(), "--log-level", "warn")
	proc.Stdout, proc.Stderr = os.Stderr, os.Stderr
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Kill(); proc.Wait() })
	doomed := "http://" + addr
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get(doomed + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})

	msgs := make([]gateway.PublishMessage, 20)
	for i := range msgs {
		msgs[i] = gateway.PublishMessage{Subject: "killed", Body: fmt.Sprint("m", i)}
	}
	ids := publish(t, cl.url, msgs...)
	// The doomed gateway's consumer pulls them all and acks none.
	pullUntil(t, doomed, "killed", "g", "doomed", ids...)
	if err := proc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	proc.Wait()
	killed := time.Now()
	got := pullUntil(t, cl.url, "killed", "g", "survivor", ids...)
	for _, id := range ids {
		if !strings.HasPrefix(got[id].Body, "m") {
			t.Fatalf("message %s came back as %+v", id, got[id])
		}
	}
	t.Logf("all %d messages came back %v after the kill (broker consumer timeout %v)", len(ids), time.Since(killed).Round(time.Millisecond), brokerTimeout)
}
