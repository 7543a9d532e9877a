package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

const helperServerEnv = "TRANSPORT_TEST_HELPER_SERVER"

// TestHelperServerProcess is not a test: run by startServerProcess in a
// child process, it serves a hold server and prints its address.
func TestHelperServerProcess(t *testing.T) {
	if os.Getenv(helperServerEnv) != "1" {
		t.Skip("helper process for the kill -9 tests")
	}
	hs := startHoldServer(t)
	fmt.Printf("ADDR %s\n", hs.Addr())
	select {} // until killed
}

// startServerProcess runs a hold server in a child process and returns its
// address and the process.
func startServerProcess(t *testing.T) (string, *os.Process) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServerProcess$")
	cmd.Env = append(os.Environ(), helperServerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			go func() { // keep draining the child's output
				for sc.Scan() {
				}
			}()
			return addr, cmd.Process
		}
	}
	t.Fatalf("the server process printed no address: %v", sc.Err())
	return "", nil
}

func TestClient_PendingFailWhenServerProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	addr, proc := startServerProcess(t)
	c := newClient(t, Options{RequestTimeout: time.Minute})
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	const n = 50
	errs := make(chan error, n)
	for range n {
		if err := c.Go(addr, protocol.CmdSend, []byte("held"), 0, func(_ []byte, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let the requests reach the server
	start := time.Now()
	if err := proc.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrConnClosed) {
				t.Fatalf("pending request = %v, want ErrConnClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("pending requests not failed after the server was killed")
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("pending requests failed only after %v", d)
	}
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err == nil || !NotSent(err) {
		t.Fatalf("Call to the killed server = %v, want a not-sent error", err)
	}
}
