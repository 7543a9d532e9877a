package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/tlsconfig"
)

// freePortBase finds a base port whose run-local ports (base … base+201)
// are free now.
func freePortBase(t *testing.T) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768–60999 by default): the
	// gate's other packages bind 127.0.0.1:0 while this test runs, and one
	// of them may take a port of the range between this check and
	// run-local.sh's listen.
	for base := 20000 + os.Getpid()%1000*10; base < 32500; base += 331 {
		free := true
		for _, off := range []int{0, 1, 2, 3, 11, 12, 13, 20, 100, 200, 201} {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port range for run-local")
	return 0
}

// dirSize is the disk space the files under dir take (allocated blocks, as
// du counts them: preallocated segments count in full).
func dirSize(t *testing.T, dir string) int64 {
	var total int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}

// TestRunLocal_NewcomerRun is a newcomer's first minutes: scripts/run-local.sh
// on a fresh data directory prints ready with its disk use, the example
// sends and receives through it, the cluster with a few hundred messages
// takes well under the gigabyte per realtime group that preallocated 1 GiB
// segments took, and Ctrl-C stops it.
func TestRunLocal_NewcomerRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("run-local.sh needs curl")
	}
	data := t.TempDir()
	base := freePortBase(t)
	cmd := exec.Command("bash", "../run-local.sh")
	cmd.Env = append(os.Environ(), "QMQ_DATA="+data, fmt.Sprintf("QMQ_PORT_BASE=%d", base))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1000)
	var waited atomic.Bool
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		err := cmd.Wait()
		waited.Store(true)
		exited <- err
	}()
	defer func() {
		if !waited.Load() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the whole group: this test started it
		}
	}()
	var printed []string
	diskUse := ""
	deadline := time.After(5 * time.Minute) // it builds the binaries first
	for ready := false; !ready || diskUse == ""; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("run-local.sh ended before ready:\n%s", strings.Join(printed, "\n"))
			}
			printed = append(printed, l)
			ready = ready || strings.HasPrefix(l, "ready:")
			if m := regexp.MustCompile(`^\s+disk use\s+(\S+) in `).FindStringSubmatch(l); m != nil {
				diskUse = m[1]
			}
		case <-deadline:
			t.Fatalf("run-local.sh not ready within 5 minutes:\n%s", strings.Join(printed, "\n"))
		}
	}
	meta := fmt.Sprintf("127.0.0.1:%d", base)
	for i := range 3 { // each writes to both realtime groups' logs and the delay server
		if err := run(meta, fmt.Sprintf("newcomer.%d", i), 500*time.Millisecond, tlsconfig.Files{}, ""); err != nil {
			t.Fatalf("the example against run-local: %v", err)
		}
	}
	if used := dirSize(t, data); used > 400<<20 {
		t.Fatalf("run-local takes %d MiB after a few messages (it printed %s), want well under a GiB", used>>20, diskUse)
	} else {
		t.Logf("run-local printed disk use %s; %d MiB after the example ran", diskUse, used>>20)
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGINT) // Ctrl-C
	for range lines {
	}
	select {
	case err := <-exited:
		if err != nil && !strings.Contains(err.Error(), "signal") {
			t.Logf("run-local.sh exit: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run-local.sh did not stop within 60 s of Ctrl-C")
	}
}
