package segment

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The mapped-write crash test re-executes the test binary as a child that
// writes batches of records through the mapping of the segment being
// written and prints the log's end after each write; the parent SIGKILLs it
// at random moments and recovers the log, which must open without damage in
// the middle (a killed copy is a torn tail) and hold everything the child
// reported written (a SIGKILL keeps the page cache).
const mappedCrashEnv = "QMQ_SEGMENT_CRASH_CHILD"

func mappedCrashOptions() LogOptions {
	return LogOptions{SegmentSize: 8 << 20}
}

func mappedCrashChild(dir string, seed int64) {
	l, err := OpenLog(dir, mappedCrashOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	if _, err := l.Recover(0, false, func(int64, uint8, []byte) error { return nil }); err != nil {
		fmt.Fprintln(os.Stderr, "recover:", err)
		os.Exit(3)
	}
	rng := rand.New(rand.NewSource(seed))
	out := bufio.NewWriter(os.Stdout)
	payload := make([]byte, 4096)
	rng.Read(payload)
	for i := 0; ; i++ {
		b := l.NewBatch()
		for range 1 + rng.Intn(200) { // batches of up to ~400 KiB
			if _, err := b.Append(1, nil, payload[:1+rng.Intn(len(payload))]); err != nil {
				fmt.Fprintln(os.Stderr, "append:", err)
				os.Exit(4)
			}
		}
		if err := l.Write(b); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(4)
		}
		fmt.Fprintf(out, "end %d\n", l.End())
		out.Flush()
		if i%8 == 7 {
			_ = l.Sync() // a running fdatasync slows the copies' page faults
		}
	}
}

func TestLogMappedWriteSurvivesKill(t *testing.T) {
	if dir := os.Getenv(mappedCrashEnv); dir != "" {
		seed, _ := strconv.ParseInt(os.Getenv(mappedCrashEnv+"_SEED"), 10, 64)
		mappedCrashChild(dir, seed)
		return
	}
	kills := 12
	if testing.Short() {
		kills = 4
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLogMappedWriteSurvivesKill$")
		cmd.Env = append(os.Environ(), mappedCrashEnv+"="+dir, fmt.Sprintf("%s_SEED=%d", mappedCrashEnv, rng.Int63()))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ends := make(chan int64, 1<<16)
		go func() {
			defer close(ends)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "end "); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					ends <- n
				}
			}
		}()
		written := int64(-1)
		select {
		case written = <-ends:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("kill %d: child wrote nothing; stderr: %s", k, stderr.String())
		}
		time.Sleep(time.Duration(5+rng.Intn(60)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for e := range ends {
			written = e
		}
		cmd.Wait()
		l, err := OpenLog(dir, mappedCrashOptions())
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.Recover(0, false, func(int64, uint8, []byte) error { return nil })
		l.Close()
		if err != nil {
			t.Fatalf("kill %d: recover: %v", k, err)
		}
		if res.End < written {
			t.Fatalf("kill %d: recovered to %d, the child had written to %d", k, res.End, written)
		}
	}
}
