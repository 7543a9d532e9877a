// Tests of the deployment files: the server binaries' command line
// (--version stamped at link time, the sample configs, precedence of
// flag > environment > file), the systemd units (systemd-analyze verify
// where present), scripts/build.sh (static, stamped; not with -short) and
// the FROM-scratch image with the three-host compose file (where a
// container engine runs; not with -short).
package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testVersion = "v0.0.0-deploytest"
	testCommit  = "0123456789abcdef"
	stampPkg    = "github.com/qmq-go/qmq/pkg/buildinfo"
)

// servers maps each server binary to its package and sample config.
var servers = map[string]string{
	"qmq-metaserver": "../../metaserver/cmd/qmq-metaserver",
	"qmq-realtime":   "../../realtime/cmd/qmq-realtime",
	"qmq-delay":      "../../delay/cmd/qmq-delay",
	"qmq-gateway":    "../../consumer/cmd/qmq-gateway",
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// goTool is the go command of the toolchain running the test.
func goTool() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

// binaries builds the server binaries once per test run, stamped with
// testVersion (a plain go build: its packages come from the build cache).
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "qmq-deploy-bin")
		if buildErr != nil {
			return
		}
		args := []string{"build", "-ldflags", fmt.Sprintf("-X %s.Version=%s -X %s.Commit=%s", stampPkg, testVersion, stampPkg, testCommit),
			"-o", binDir + "/"}
		for _, pkg := range servers {
			args = append(args, pkg)
		}
		out, err := exec.Command(goTool(), args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// run runs a binary with args and extra environment (the test's own QMQ_*
// variables removed), returning its exit code and output.
func run(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	default:
		t.Fatalf("%s %v: %v", bin, args, err)
		return -1, "", ""
	}
}

func TestBinaries_VersionIsStamped(t *testing.T) {
	dir := binaries(t)
	for name := range servers {
		code, out, errOut := run(t, filepath.Join(dir, name), nil, "--version")
		want := fmt.Sprintf("%s %s (commit %s, go", name, testVersion, testCommit)
		if code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("%s --version: exit %d, %q (stderr %q), want prefix %q", name, code, out, errOut, want)
		}
	}
}

// flagNames lists the flags a binary's --help shows, less the command
// line's own (config, check-config, help, version).
func flagNames(t *testing.T, bin string) []string {
	t.Helper()
	code, out, _ := run(t, bin, nil, "--help")
	if code != 0 {
		t.Fatalf("%s --help: exit %d", bin, code)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "config", "check-config", "help", "version":
		default:
			names = append(names, m[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("%s --help shows %d flags:\n%s", bin, len(names), out)
	}
	return names
}

// Each sample config loads and validates in its binary, and names every
// flag the binary has (set, or commented out with its default).
func TestBinaries_SampleConfigsLoadAndAreComplete(t *testing.T) {
	dir := binaries(t)
	for name := range servers {
		sample, err := filepath.Abs(filepath.Join("..", "config", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		code, _, errOut := run(t, filepath.Join(dir, name), nil, "--config", sample, "--check-config")
		if code != 0 {
			t.Errorf("%s --config %s --check-config: exit %d: %s", name, sample, code, errOut)
		}
		text, err := os.ReadFile(sample)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flagNames(t, filepath.Join(dir, name)) {
			if !regexp.MustCompile(`(?m)^(# )?` + regexp.QuoteMeta(f) + `:`).Match(text) {
				t.Errorf("%s does not name the key %s", sample, f)
			}
		}
	}
}

// The real binary applies flag > environment > file > default, and
// refuses a typo in the file with exit code 2.
func TestBinaries_Precedence(t *testing.T) {
	bin := filepath.Join(binaries(t), "qmq-realtime")
	sample, _ := filepath.Abs("../config/qmq-realtime.yaml")
	// The file sets addr 0.0.0.0:20881 with advertise-addr 10.0.0.11:20881.
	if code, _, errOut := run(t, bin, nil, "--config", sample, "--check-config"); code != 0 {
		t.Fatalf("the file alone: exit %d: %s", code, errOut)
	}
	// The environment overrides the file: a wildcard advertise address is refused.
	env := []string{"QMQ_ADVERTISE_ADDR=0.0.0.0:20881"}
	if code, _, errOut := run(t, bin, env, "--config", sample, "--check-config"); code != 2 || !strings.Contains(errOut, "advertise") {
		t.Fatalf("environment over file: exit %d: %s", code, errOut)
	}
	// A flag overrides the environment.
	if code, _, errOut := run(t, bin, env, "--config", sample, "--check-config", "--advertise-addr", "10.0.0.99:20881"); code != 0 {
		t.Fatalf("flag over environment: exit %d: %s", code, errOut)
	}
	// The defaults (loopback) hold where nothing else is set; the
	// environment alone moves the listener to all interfaces.
	if code, _, errOut := run(t, bin, []string{"QMQ_META=127.0.0.1:1"}, "--check-config"); code != 0 {
		t.Fatalf("defaults: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, bin, []string{"QMQ_META=127.0.0.1:1", "QMQ_ADDR=0.0.0.0:20881", "QMQ_INSECURE=true"}, "--check-config"); code != 2 || !strings.Contains(errOut, "--advertise-addr") {
		t.Fatalf("environment over defaults: exit %d: %s", code, errOut)
	}
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, []byte("group: rt1\nmeta_servers: [127.0.0.1:1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, bin, nil, "--config", typo, "--check-config"); code != 2 || !strings.Contains(errOut, "meta_servers") {
		t.Fatalf("a key that names no flag: exit %d: %s", code, errOut)
	}
}

// The systemd units pass systemd-analyze verify (with ExecStart pointing
// at the binaries built here), with no warning.
func TestSystemdUnits_Verify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed here: the units are not verified")
	}
	dir := binaries(t)
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) != 4 {
		t.Fatalf("units %v %v, want 4", units, err)
	}
	work := t.TempDir()
	var args []string
	for _, u := range units {
		text, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(text, []byte("ExecStart=/usr/local/bin/")) {
			t.Fatalf("%s: no ExecStart=/usr/local/bin/...", u)
		}
		text = bytes.ReplaceAll(text, []byte("/usr/local/bin/"), []byte(dir+"/"))
		base := filepath.Base(u)
		if err := os.WriteFile(filepath.Join(work, base), text, 0o644); err != nil {
			t.Fatal(err)
		}
		// A template unit is verified as an instance of it.
		if strings.HasSuffix(base, "@.service") {
			base = strings.TrimSuffix(base, "@.service") + "@g1.service"
		}
		args = append(args, "./"+base)
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--man=no"}, args...)...)
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %v: %v\n%s", args, err, out)
	}
}

// scripts/build.sh builds every binary static (no program interpreter)
// with the version and commit stamped.
func TestBuildScript_StaticAndStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary with -trimpath (minutes on a busy machine)")
	}
	out := t.TempDir()
	cmd := exec.Command("./build.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "OUT="+out, "VERSION="+testVersion, "COMMIT="+testCommit, "PATH="+filepath.Dir(goTool())+":"+os.Getenv("PATH"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"qmq-metaserver", "qmq-realtime", "qmq-delay", "qmq-gateway", "qmqctl"} {
		path := filepath.Join(out, name)
		f, err := elf.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", name)
			}
		}
		f.Close()
		if _, ok := servers[name]; !ok {
			continue
		}
		code, text, _ := run(t, path, nil, "--version")
		if code != 0 || !strings.Contains(text, testVersion+" (commit "+testCommit) {
			t.Errorf("%s --version: exit %d %q", name, code, text)
		}
	}
}

// containerEngine returns a container engine that runs here and its
// compose command, or a reason to skip.
func containerEngine() (engine string, compose []string, why string) {
	for _, e := range []string{"podman", "docker"} {
		path, err := exec.LookPath(e)
		if err != nil {
			continue
		}
		if err := exec.Command(path, "info").Run(); err != nil {
			why += fmt.Sprintf("%s is installed but does not run (%s info: %v); ", e, e, err)
			continue
		}
		if exec.Command(path, "compose", "version").Run() == nil {
			return path, []string{path, "compose"}, ""
		}
		for _, c := range []string{e + "-compose", "docker-compose"} {
			if p, err := exec.LookPath(c); err == nil {
				return path, []string{p}, ""
			}
		}
		why += e + " runs but has no compose; "
	}
	if why == "" {
		why = "neither podman nor docker is installed"
	}
	return "", nil, why
}

// The FROM-scratch image builds, and the three-host compose file starts:
// every service keeps running and host 1's meta server answers /healthz.
func TestImageAndCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and starts 15 containers")
	}
	engine, compose, why := containerEngine()
	if engine == "" {
		t.Skip("no container engine runs here: " + strings.TrimSuffix(why, "; "))
	}
	image := "qmq-go:deploytest"
	build := exec.Command("./image.sh")
	build.Env = append(os.Environ(), "ENGINE="+engine, "IMAGE=qmq-go", "VERSION=deploytest",
		"PATH="+filepath.Dir(goTool())+":"+os.Getenv("PATH"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("image.sh: %v\n%s", err, out)
	}
	if out, err := exec.Command(engine, "run", "--rm", image, "qmq-realtime", "--version").CombinedOutput(); err != nil {
		// A nested sandbox may refuse what the runtime does to start any
		// container (setrlimit, mounts): not the image's fault.
		t.Skipf("%s built the image but cannot run a container here: %v: %s", engine, err, out)
	}
	project := fmt.Sprintf("qmqtest%d", os.Getpid())
	composeCmd := func(args ...string) *exec.Cmd {
		all := append(append(append([]string{}, compose[1:]...), "-p", project, "-f", "compose.yaml"), args...)
		c := exec.Command(compose[0], all...)
		c.Env = append(os.Environ(), "QMQ_IMAGE="+image)
		return c
	}
	t.Cleanup(func() {
		if out, err := composeCmd("down", "-v", "--timeout", "30").CombinedOutput(); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	if out, err := composeCmd("up", "-d").CombinedOutput(); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get("http://127.0.0.1:18080/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			logs, _ := composeCmd("logs", "--tail", "20").CombinedOutput()
			t.Fatalf("meta server of host 1 not healthy after 3 min (%v)\n%s", err, logs)
		}
		time.Sleep(time.Second)
	}
	out, err := composeCmd("ps", "--all", "--format", "{{.Service}} {{.State}}").CombinedOutput()
	if err != nil {
		t.Fatalf("compose ps: %v\n%s", err, out)
	}
	running := strings.Count(string(out), "running")
	if running != 15 {
		t.Fatalf("%d of 15 services running:\n%s", running, out)
	}
}

// A server bound to all interfaces refuses to start without the address to
// register (exit 2, naming the flag to give), and accepts one.
func TestBinaries_WildcardNeedsAdvertise(t *testing.T) {
	dir := binaries(t)
	meta := []string{"--meta", "10.0.0.11:20880"}
	for _, c := range []struct {
		bin       string
		args      []string
		flag, fix string
	}{
		{"qmq-realtime", append([]string{"--addr", "0.0.0.0:20881", "--insecure"}, meta...), "--advertise-addr", "10.0.0.12:20881"},
		{"qmq-delay", append([]string{"--addr", "[::]:20801", "--insecure"}, meta...), "--advertise-addr", "10.0.0.12:20801"},
		{"qmq-metaserver", []string{"--addr", ":20880", "--insecure", "--etcd-endpoints", "10.0.0.11:2379"}, "--advertise-addr", "10.0.0.11:20880"},
		{"qmq-metaserver", []string{"--etcd-listen", "0.0.0.0:2379", "--insecure"}, "--etcd-advertise", "10.0.0.11:2379"},
		{"qmq-metaserver", []string{"--etcd-peer", "0.0.0.0:2380", "--insecure"}, "--etcd-advertise-peer", "10.0.0.11:2380"},
	} {
		bin := filepath.Join(dir, c.bin)
		args := append(append([]string{}, c.args...), "--check-config")
		if code, _, errOut := run(t, bin, nil, args...); code != 2 || !strings.Contains(errOut, c.flag) {
			t.Errorf("%s %v: exit %d, %q; want 2 naming %s", c.bin, args, code, errOut, c.flag)
		}
		args = append(args, c.flag, c.fix)
		if code, _, errOut := run(t, bin, nil, args...); code != 0 {
			t.Errorf("%s %v: exit %d: %s", c.bin, args, code, errOut)
		}
	}
}
