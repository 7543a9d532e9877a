package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a server the suite started as a child; stop ends it by PID.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProcess runs bin with args, its output kept for error reports.
func startProcess(name, bin string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// stop sends SIGTERM, then SIGKILL after a grace period.
func (p *process) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL and waits.
func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// waitTCP waits until addr accepts connections or the process exits.
func (p *process) waitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited (%v): %s", p.name, err, tail(p.out.String()))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening on %s after %v: %s", p.name, addr, timeout, tail(p.out.String()))
}

// waitHTTP waits until url answers 200.
func (p *process) waitHTTP(url string, timeout time.Duration) error {
	return p.waitHTTPWith(http.DefaultClient, url, timeout)
}

// waitHTTPWith is waitHTTP through c (an HTTPS client, say).
func (p *process) waitHTTPWith(c *http.Client, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited (%v): %s", p.name, err, tail(p.out.String()))
		default:
		}
		if resp, err := c.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready at %s after %v: %s", p.name, url, timeout, tail(p.out.String()))
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// freeAddr returns a loopback address with a free port.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startRealtime runs bin/qmq-realtime with its data under dir and waits
// until it is ready. It returns the process and its client address.
func (e *Env) startRealtime(dir string, extra ...string) (*process, string, error) {
	addr, httpAddr := freeAddr(), freeAddr()
	args := append([]string{"--addr", addr, "--http-addr", httpAddr, "--data-dir", dir, "--log-level", "warn"}, extra...)
	p, err := startProcess("qmq-realtime", filepath.Join(e.Bin, "qmq-realtime"), args...)
	if err != nil {
		return nil, "", err
	}
	if err := p.waitHTTP("http://"+httpAddr+"/readyz", 60*time.Second); err != nil {
		p.kill()
		return nil, "", err
	}
	return p, addr, nil
}

// peerBin returns the path of a peer binary, or an error saying how to build it.
func (e *Env) peerBin(name string) (string, error) {
	p := filepath.Join(e.PeersBin, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("peer %s not built (run scripts/peers/build.sh): %w", name, err)
	}
	return p, nil
}

// nsqdMemQueue is the --mem-queue-size of nsqd "in memory": above the
// messages any suite sends it (an 8 s bench_writer run sends up to ~5 M;
// the consume backlog is 2 M), so nothing goes to its disk queue, which
// nsqMemoryOnly checks. nsq's own bench.sh uses 1,000,000, which an 8 s run
// overflows. nsqd allocates the queue as a channel of that many pointers
// (160 MB per topic and per channel).
const nsqdMemQueue = 20_000_000

// nsqdDefaultQueue asks startNSQDWith for nsqd's default settings: a memory
// queue of 10,000 messages per topic and channel, the rest to its disk
// queue (diskqueue: fsync every 2,500 messages or 2 s).
const nsqdDefaultQueue = -1

// startNSQD runs nsqd in memory (--mem-queue-size=nsqdMemQueue) with data
// in dir.
func (e *Env) startNSQD(dir string) (*process, string, string, error) {
	return e.startNSQDWith(dir, nsqdMemQueue)
}

// startNSQDWith runs nsqd with --mem-queue-size=memQueue (nsqdDefaultQueue:
// its default) and data in dir; it returns the process, its TCP and HTTP
// addresses.
func (e *Env) startNSQDWith(dir string, memQueue int64) (*process, string, string, error) {
	bin, err := e.peerBin("nsqd")
	if err != nil {
		return nil, "", "", err
	}
	tcp, httpAddr := freeAddr(), freeAddr()
	os.MkdirAll(dir, 0o755)
	args := []string{"--tcp-address=" + tcp, "--http-address=" + httpAddr, "--data-path=" + dir, "--log-level=warn"}
	if memQueue != nsqdDefaultQueue {
		args = append(args, fmt.Sprintf("--mem-queue-size=%d", memQueue))
	}
	p, err := startProcess("nsqd", bin, args...)
	if err != nil {
		return nil, "", "", err
	}
	if err := p.waitHTTP("http://"+httpAddr+"/ping", 30*time.Second); err != nil {
		p.kill()
		return nil, "", "", err
	}
	return p, tcp, httpAddr, nil
}

// nsqStats is what the suites read from nsqd's /stats: per topic and
// channel the messages held (depth) and how many of them are in its disk
// queue (backend_depth).
type nsqStats struct {
	Topics []struct {
		Name         string `json:"topic_name"`
		Depth        int64  `json:"depth"`
		BackendDepth int64  `json:"backend_depth"`
		MessageCount int64  `json:"message_count"`
		Channels     []struct {
			Name         string `json:"channel_name"`
			Depth        int64  `json:"depth"`
			BackendDepth int64  `json:"backend_depth"`
		} `json:"channels"`
	} `json:"topics"`
}

func readNSQStats(httpAddr string) (nsqStats, error) {
	var st nsqStats
	resp, err := http.Get("http://" + httpAddr + "/stats?format=json")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return st, fmt.Errorf("nsqd /stats: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// errNSQDSpilled fails a figure meant for nsqd in memory when nsqd put
// messages in its disk queue.
var errNSQDSpilled = errors.New("nsqd put messages in its disk queue: the in-memory figure would be wrong")

// nsqMemoryOnly checks with nsqd's /stats that no topic or channel has
// messages in its disk queue, and returns the messages the topics took.
func nsqMemoryOnly(httpAddr string) (int64, error) {
	st, err := readNSQStats(httpAddr)
	if err != nil {
		return 0, err
	}
	var took int64
	for _, t := range st.Topics {
		took += t.MessageCount
		if t.BackendDepth > 0 {
			return took, fmt.Errorf("%w: topic %s holds %d of %d there", errNSQDSpilled, t.Name, t.BackendDepth, t.Depth)
		}
		for _, c := range t.Channels {
			if c.BackendDepth > 0 {
				return took, fmt.Errorf("%w: channel %s/%s holds %d of %d there", errNSQDSpilled, t.Name, c.Name, c.BackendDepth, c.Depth)
			}
		}
	}
	return took, nil
}

// nsqEmptyTopic drops every message nsqd holds for topic (POST
// /topic/empty), so that its heap is free for the next run.
func nsqEmptyTopic(httpAddr, topic string) error {
	resp, err := http.Post("http://"+httpAddr+"/topic/empty?topic="+topic, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("nsqd /topic/empty: %s", resp.Status)
	}
	return nil
}

// jetStreamSyncDefault is nats-server's default sync_interval: JetStream
// file storage fsyncs every 2 minutes (and on close), not per message.
const jetStreamSyncDefault = 2 * time.Minute

// startNATS runs nats-server with JetStream on file storage in dir, at its
// default sync interval (jetStreamSyncDefault).
func (e *Env) startNATS(dir string) (*process, string, error) {
	return e.startNATSWith(dir, "")
}

// startNATSWith is startNATS with JetStream's sync_interval set to
// syncInterval ("always": fsync after every write), or its default when
// empty.
func (e *Env) startNATSWith(dir, syncInterval string) (*process, string, error) {
	bin, err := e.peerBin("nats-server")
	if err != nil {
		return nil, "", err
	}
	addr := freeAddr()
	host, port, _ := net.SplitHostPort(addr)
	os.MkdirAll(dir, 0o755)
	conf := filepath.Join(dir, "nats.conf")
	sync := ""
	if syncInterval != "" {
		sync = ", sync_interval: " + syncInterval
	}
	cfg := fmt.Sprintf("listen: \"%s:%s\"\njetstream { store_dir: %q, max_file_store: 20GB, max_memory_store: 2GB%s }\n",
		host, port, filepath.Join(dir, "js"), sync)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		return nil, "", err
	}
	p, err := startProcess("nats-server", bin, "-c", conf)
	if err != nil {
		return nil, "", err
	}
	if err := p.waitTCP(addr, 30*time.Second); err != nil {
		p.kill()
		return nil, "", err
	}
	return p, addr, nil
}

// runTool runs a peer's command-line tool to completion and returns its
// output.
func runTool(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, tail(string(out)))
	}
	return string(out), nil
}

var (
	nsqOpsRe  = regexp.MustCompile(`([0-9.]+)ops/s`)
	natsMsgRe = regexp.MustCompile(`(?i)([0-9,]+) msgs/sec`)
)

// parseRate finds the first rate re matches in out.
func parseRate(re *regexp.Regexp, out string) (float64, error) {
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no rate in output: %s", tail(out))
	}
	return strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
}

// lines returns out's non-empty lines (for logging tool output).
func lines(out string) []string {
	var l []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			l = append(l, t)
		}
	}
	return l
}

// runToolEnv is runTool with extra environment variables.
func runToolEnv(ctx context.Context, env []string, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, tail(string(out)))
	}
	return string(out), nil
}

func lastLine(out string) string {
	l := lines(out)
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}
