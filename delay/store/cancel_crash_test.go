package store

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestCancel_SIGKILL: a child process stores 400 keyed messages due a few
// seconds ahead and cancels every other one, one request at a time,
// printing each answer; the parent SIGKILLs it in the middle of the
// cancels, then runs a second child on the directory until everything due
// has come out. No message answered cancelled comes out; every message not
// cancelled does (a cancel in flight when the child died may go either
// way, but only those).

const (
	cancelCrashDirEnv  = "QMQ_DELAY_CANCEL_CRASH_DIR"
	cancelCrashModeEnv = "QMQ_DELAY_CANCEL_CRASH_MODE"
	cancelCrashDueEnv  = "QMQ_DELAY_CANCEL_CRASH_DUE"
	cancelCrashN       = 400
)

func TestCancelCrashChild(t *testing.T) {
	dir := os.Getenv(cancelCrashDirEnv)
	if dir == "" {
		t.Skip("helper process of TestCancel_SIGKILL")
	}
	dueMs, _ := strconv.ParseInt(os.Getenv(cancelCrashDueEnv), 10, 64)
	due := time.UnixMilli(dueMs)
	// No checkpoint while the child lives: the cancels are in the message
	// log only (and in dispatch logs the kernel holds).
	s, err := Open(dir, Options{CheckpointInterval: time.Hour}, nil, nil)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...); out.Flush() }
	switch os.Getenv(cancelCrashModeEnv) {
	case "cancel":
		var msgs [][]byte
		for i := 0; i < cancelCrashN; i++ {
			msgs = append(msgs, encodeKeyed(t, fmt.Sprint("m", i), fmt.Sprint("k", i), due))
		}
		for _, r := range s.AppendWait(msgs) {
			if r.Err != nil {
				say("ERR append %v", r.Err)
				os.Exit(1)
			}
		}
		say("STORED")
		for i := 0; i < cancelCrashN; i += 2 {
			r := s.CancelWait([]protocol.ScheduleTarget{byKey(fmt.Sprint("k", i))})[0]
			if r.Err != nil {
				say("ERR cancel k%d: %v", i, r.Err)
				continue
			}
			say("C m%d", i)
		}
		say("DONE")
		select {} // killed by the parent
	case "drain":
		deadline := time.After(time.Until(due) + 3*time.Second)
		for {
			select {
			case batch := <-s.Due():
				var refs []Ref
				for _, d := range batch {
					v, _ := protocol.ParseMessage(d.Message)
					say("D %s", v.ID)
					refs = append(refs, d.Ref)
				}
				s.MarkDispatched(refs)
			case <-deadline:
				s.Close()
				say("END")
				return
			}
		}
	}
}

func TestCancel_SIGKILL(t *testing.T) {
	dir := t.TempDir()
	due := time.Now().Add(5 * time.Second) // room for a slow start on a loaded machine
	// run starts a child and feeds its lines to onLine until it returns
	// false; rest feeds it the lines after that, to the end of the output.
	run := func(mode string, onLine func(string) bool) (cmd *exec.Cmd, rest func()) {
		cmd = exec.Command(os.Args[0], "-test.run=^TestCancelCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), cancelCrashDirEnv+"="+dir, cancelCrashModeEnv+"="+mode,
			cancelCrashDueEnv+"="+strconv.FormatInt(due.UnixMilli(), 10))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "ERR") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("%s child: %s", mode, line)
			}
			if !onLine(line) {
				break
			}
		}
		return cmd, func() {
			for sc.Scan() {
				onLine(sc.Text())
			}
		}
	}
	cancelled := map[string]bool{}
	cmd, rest := run("cancel", func(line string) bool {
		if id, ok := strings.CutPrefix(line, "C "); ok {
			cancelled[id] = true
		}
		// Killed in the middle: about a third of the cancels answered.
		return len(cancelled) < cancelCrashN/6 && line != "DONE"
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	rest() // answers printed before the kill
	cmd.Wait()
	delivered := map[string]int{}
	ended := false
	cmd, _ = run("drain", func(line string) bool {
		if id, ok := strings.CutPrefix(line, "D "); ok {
			delivered[id]++
		}
		ended = line == "END"
		return !ended
	})
	cmd.Wait()
	if !ended {
		t.Fatal("drain child did not finish")
	}
	if len(cancelled) == 0 {
		t.Fatal("no cancel answered before the kill")
	}
	inFlight := 0
	for i := 0; i < cancelCrashN; i++ {
		id := fmt.Sprint("m", i)
		switch {
		case cancelled[id] && delivered[id] > 0:
			t.Fatalf("%s was answered cancelled and delivered after the kill", id)
		case i%2 == 1 && delivered[id] != 1:
			t.Fatalf("%s (never cancelled) delivered %d times", id, delivered[id])
		case i%2 == 0 && !cancelled[id] && delivered[id] == 0:
			inFlight++ // its cancel was under way at the kill and took effect
		}
	}
	if inFlight > 1 {
		t.Fatalf("%d messages neither answered cancelled nor delivered: only the one cancel in flight at the kill may be", inFlight)
	}
	t.Logf("%d answered cancelled before the kill; %d delivered after it", len(cancelled), len(delivered))
}
