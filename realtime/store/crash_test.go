package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// The crash test re-executes the test binary as a child that appends with
// FlushSync and prints every acknowledged message; the parent SIGKILLs it at
// random moments and checks the store after each kill. scripts/crash-store.sh
// runs the full variant (QMQ_CRASH_KILLS, default 25), where every fourth
// child uses FlushAsync (a SIGKILL keeps the page cache, so its acks must
// survive too). Every second child, in the gate's variant too, runs with
// a 64 KiB page cache window moved every 5 ms (the broker's window,
// realtime.Options), so what the window drops is read back after a kill.
const crashChildEnv = "QMQ_STORE_CRASH_CHILD"

func crashOptions() Options {
	o := testOptions()
	o.SegmentSize = 1 << 20 // many segment rolls
	o.Limits = protocol.DefaultLimits
	o.Limits.MaxBody = 64 << 10
	o.Limits.MaxPropertyBytes = 64 << 10
	o.ActionSegmentSize = 256 << 10
	o.ConsumeSegmentEntries = 1024
	o.PullSegmentEntries = 1024
	o.CheckpointInterval = 150 * time.Millisecond
	o.ActionFlushInterval = 10 * time.Millisecond
	return o
}

// crashChild appends until killed; each line "ack <subject> <seq> <id>" is a
// message whose append returned successfully.
func crashChild(dir, run string) {
	opts := crashOptions()
	if os.Getenv(crashChildEnv+"_FLUSH") == string(FlushAsync) {
		// SIGKILL keeps the page cache: async acks must survive it too.
		opts.Flush = FlushAsync
	}
	if os.Getenv(crashChildEnv+"_WINDOW") != "" {
		// The broker's page cache window (realtime.Options), small and
		// moving often: what it drops must still read back after a kill.
		opts.PageCacheWindow = 64 << 10
		opts.PageCacheInterval = 5 * time.Millisecond
	}
	s, err := Open(dir, opts, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	subjects := []string{"alpha", "beta", "gamma", protocol.RetrySubject("alpha", "g")}
	// A consumer pulls and acks meanwhile so the action log has work too.
	go func() {
		for {
			for _, sub := range subjects[:2] {
				r, err := s.Pull(PullRequest{Subject: sub, Group: "g", Consumer: "c", Max: 32, KnownPullSeq: -1, Earliest: true})
				if err == nil && len(r.Messages) > 0 && !r.Redelivered {
					s.Ack(AckRequest{Subject: sub, Group: "g", Consumer: "c", First: r.Messages[0].PullSeq, Last: r.Messages[len(r.Messages)-1].PullSeq})
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := 0; ; i++ {
				n := 1 + rng.Intn(40)
				msgs := make([][]byte, n)
				meta := make([]string, n)
				for k := range msgs {
					sub := subjects[rng.Intn(len(subjects))]
					id := fmt.Sprintf("%s-%d-%d-%d", run, w, i, k)
					body := make([]byte, rng.Intn(2000))
					rng.Read(body)
					m, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: sub, ID: id, Body: body, Tags: []string{"t" + strconv.Itoa(k%3)}}, protocol.DefaultLimits)
					msgs[k], meta[k] = m, sub+" "+id
				}
				res, err := s.Append(context.Background(), msgs)
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(4)
				}
				mu.Lock()
				for k, r := range res {
					if r.Err == nil {
						sub, id, _ := strings.Cut(meta[k], " ")
						fmt.Fprintf(out, "ack %s %d %s\n", sub, r.Seq, id)
					}
				}
				out.Flush()
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}

func TestCrashRecovery(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir, os.Getenv(crashChildEnv+"_RUN"))
		return
	}
	kills := 5
	if v, err := strconv.Atoi(os.Getenv("QMQ_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	} else if !testing.Short() {
		kills = 8
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	type acked struct {
		subject, id string
		seq         int64
	}
	var all []acked
	for k := 0; k < kills; k++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRecovery$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("%s_RUN=r%d", crashChildEnv, k))
		if !testing.Short() && k%4 == 3 {
			cmd.Env = append(cmd.Env, crashChildEnv+"_FLUSH="+string(FlushAsync))
		}
		if k%2 == 1 {
			cmd.Env = append(cmd.Env, crashChildEnv+"_WINDOW=1")
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan acked, 1<<16)
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 4 || f[0] != "ack" {
					continue
				}
				seq, _ := strconv.ParseInt(f[2], 10, 64)
				lines <- acked{subject: f[1], seq: seq, id: f[3]}
			}
		}()
		// Wait for the first ack, then kill at a random moment.
		var got []acked
		select {
		case a := <-lines:
			got = append(got, a)
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("run %d: child produced no ack; stderr: %s", k, stderr.String())
		}
		time.Sleep(time.Duration(20+rng.Intn(400)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-readDone
		cmd.Wait()
	drain:
		for {
			select {
			case a := <-lines:
				got = append(got, a)
			default:
				break drain
			}
		}
		all = append(all, got...)
		verifyCrash(t, dir, k, func(yield func(subject, id string, seq int64)) {
			for _, a := range all {
				yield(a.subject, a.id, a.seq)
			}
		})
		t.Logf("kill %d: %d acks this run, %d in total", k, len(got), len(all))
	}
}

// verifyCrash opens the store left by a killed child and checks that every
// acknowledged message is there with its sequence, in order, with a valid
// CRC, that the consume logs agree with the message log and that group
// state is sane.
func verifyCrash(t *testing.T, dir string, k int, acks func(func(subject, id string, seq int64))) {
	t.Helper()
	s, err := Open(dir, crashOptions(), zap.NewNop())
	if err != nil {
		t.Fatalf("kill %d: reopen: %v", k, err)
	}
	defer s.Close()
	bySubject := map[string][]Pulled{}
	for _, st := range s.Stats().Subjects {
		msgs, err := s.Read(st.Subject, 0, int(st.NextSeq)+1)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(msgs)) != st.NextSeq {
			t.Fatalf("kill %d: subject %s has %d readable messages, next seq %d", k, st.Subject, len(msgs), st.NextSeq)
		}
		for i, m := range msgs {
			v, err := protocol.ParseMessage(m.Message)
			if err != nil {
				t.Fatalf("kill %d: %s seq %d: %v", k, st.Subject, i, err)
			}
			if m.ConsumeSeq != int64(i) || string(v.Subject) != st.Subject {
				t.Fatalf("kill %d: %s seq %d holds seq %d of %s", k, st.Subject, i, m.ConsumeSeq, v.Subject)
			}
		}
		bySubject[st.Subject] = msgs
	}
	acks(func(subject, id string, seq int64) {
		msgs := bySubject[subject]
		if seq >= int64(len(msgs)) {
			t.Fatalf("kill %d: acked %s seq %d (%s) lost; subject has %d", k, subject, seq, id, len(msgs))
		}
		if got := msgID(t, msgs[seq].Message); got != id {
			t.Fatalf("kill %d: %s seq %d holds %s, acked %s", k, subject, seq, got, id)
		}
	})
	for _, g := range s.Stats().Groups {
		for _, c := range g.Consumers {
			if c.AckSeq >= c.PullSeq {
				t.Fatalf("kill %d: consumer %+v acked past its pulls", k, c)
			}
		}
		var next int64
		for _, st := range s.Stats().Subjects {
			if st.Subject == g.Subject {
				next = st.NextSeq
			}
		}
		if g.Cursor > next {
			t.Fatalf("kill %d: group %s/%s cursor %d past next %d", k, g.Subject, g.Group, g.Cursor, next)
		}
		// The recovered group serves: its consumer's un-acked entries and
		// then new ones, every message intact.
		r, err := s.Pull(PullRequest{Subject: g.Subject, Group: g.Group, Consumer: "c", Max: 64, KnownPullSeq: -1})
		if err != nil {
			t.Fatalf("kill %d: pull after restart: %v", k, err)
		}
		for _, m := range r.Messages {
			if _, err := protocol.ParseMessage(m.Message); err != nil {
				t.Fatalf("kill %d: pulled message %d: %v", k, m.ConsumeSeq, err)
			}
		}
	}
}
