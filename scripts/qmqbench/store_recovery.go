package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// store_recovery_s: a child process (this binary, re-executed with
// QMQBENCH_STORE_FILL set) opens a store with a one-minute checkpoint
// interval, takes a checkpoint, appends 256-byte messages to 16 subjects
// until the message log holds 2 GiB, says "full" and waits; the parent
// SIGKILLs it and times Open, which must validate and replay all 2 GiB
// written after the checkpoint (a checkpoint a minute old at full speed
// covers more than that).
const (
	storeFillEnv   = "QMQBENCH_STORE_FILL"
	recoveryTarget = 2 << 30
)

func init() {
	if dir := os.Getenv(storeFillEnv); dir != "" {
		if err := storeFill(dir); err != nil {
			fmt.Fprintln(os.Stderr, "fill:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func storeFill(dir string) error {
	opts := benchStoreOptions(store.FlushAsync)
	opts.CheckpointInterval = time.Minute
	s, err := store.Open(dir, opts, nil)
	if err != nil {
		return err
	}
	if err := s.Checkpoint(); err != nil {
		return err
	}
	batches := make([][][]byte, 16)
	for i := range batches {
		batches[i] = make([][]byte, 64)
		for k := range batches[i] {
			batches[i][k] = benchMessage(fmt.Sprintf("subject%d", i), i*64+k)
		}
	}
	per := int64(len(batches[0]) * (benchMsgSize + 28))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for n := int64(0); n*per < recoveryTarget; n++ {
		sem <- struct{}{}
		wg.Add(1)
		views, results := store.Views(batches[n%16], protocol.DefaultLimits)
		if err := s.AppendAsync(views, results, func([]store.Result) { <-sem; wg.Done() }); err != nil {
			return err
		}
	}
	wg.Wait()
	fmt.Println("full")
	select {} // wait for SIGKILL
}

func benchRecovery(env *Env) (float64, error) {
	dir := benchDir(env, "recovery")
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), storeFillEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	fillStart := time.Now()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "full" {
		cmd.Process.Kill()
		cmd.Wait()
		return 0, fmt.Errorf("fill child said %q", line)
	}
	env.Logf("filled 2 GiB in %v", time.Since(fillStart))
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	start := time.Now()
	s, err := store.Open(dir, benchStoreOptions(store.FlushAsync), nil)
	if err != nil {
		return 0, err
	}
	el := time.Since(start)
	rep := s.Stats().Open
	st := s.Stats()
	s.Close()
	env.Logf("recovery replayed %d messages (%d subjects, log end %d bytes) in %v", rep.MessagesReplayed, len(st.Subjects), st.MessageLogEnd, el)
	if st.MessageLogEnd < recoveryTarget {
		return 0, fmt.Errorf("log holds %d bytes, want %d", st.MessageLogEnd, int64(recoveryTarget))
	}
	return el.Seconds(), nil
}
