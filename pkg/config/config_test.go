package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/buildinfo"
)

type testOptions struct {
	Meta     []string
	Addr     string
	Workers  int
	Interval time.Duration
	Sync     bool
	TLSCert  string
	Removed  bool
}

func testFlags(o *testOptions) *flag.FlagSet {
	*o = testOptions{Meta: []string{"d:1"}, Addr: "127.0.0.1:1", Workers: 4, Interval: time.Second}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.StringVar(&o.Addr, "addr", o.Addr, "listen address")
	fs.IntVar(&o.Workers, "workers", o.Workers, "")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "")
	fs.BoolVar(&o.Sync, "sync", o.Sync, "")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "")
	StringList(fs, &o.Meta, "meta-servers", "")
	fs.Func("admin-token", "removed: use --admin-token-file", func(string) error {
		o.Removed = true
		return errors.New("removed")
	})
	return fs
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func parse(t *testing.T, file string, env []string, args ...string) (testOptions, error) {
	t.Helper()
	var o testOptions
	fs := testFlags(&o)
	if file != "" {
		args = append([]string{"--config", writeFile(t, file)}, args...)
	}
	err := Parse(fs, args, env)
	return o, err
}

// Each source overrides the one below it, key by key: flag > environment >
// file > default.
func TestParse_Precedence(t *testing.T) {
	file := "workers: 8\naddr: 127.0.0.1:2\ninterval: 5s\nsync: true\nmeta-servers: [f:1, f:2]\n"
	env := []string{"QMQ_WORKERS=16", "QMQ_META_SERVERS=e:1,e:2,e:3", "PATH=/bin"}

	o, err := parse(t, "", nil)
	if err != nil || o.Workers != 4 || o.Addr != "127.0.0.1:1" || o.Interval != time.Second || o.Sync || len(o.Meta) != 1 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	o, err = parse(t, file, nil)
	if err != nil || o.Workers != 8 || o.Addr != "127.0.0.1:2" || o.Interval != 5*time.Second || !o.Sync ||
		strings.Join(o.Meta, ",") != "f:1,f:2" {
		t.Fatalf("file over defaults: %+v %v", o, err)
	}
	o, err = parse(t, file, env)
	if err != nil || o.Workers != 16 || o.Addr != "127.0.0.1:2" || strings.Join(o.Meta, ",") != "e:1,e:2,e:3" {
		t.Fatalf("environment over file: %+v %v", o, err)
	}
	o, err = parse(t, file, env, "--workers=32", "--meta-servers", "c:1", "--meta-servers", "c:2")
	if err != nil || o.Workers != 32 || o.Addr != "127.0.0.1:2" || strings.Join(o.Meta, ",") != "c:1,c:2" {
		t.Fatalf("flags over environment: %+v %v", o, err)
	}
	o, err = parse(t, "", []string{"QMQ_INTERVAL=3s", "QMQ_SYNC=true"})
	if err != nil || o.Interval != 3*time.Second || !o.Sync || o.Workers != 4 {
		t.Fatalf("environment over defaults: %+v %v", o, err)
	}
}

func TestParse_FileShapes(t *testing.T) {
	o, err := parse(t, "tls:\n  cert: /c.pem\naddr:\n", nil)
	if err != nil || o.TLSCert != "/c.pem" || o.Addr != "127.0.0.1:1" {
		t.Fatalf("nested key and empty value: %+v %v", o, err)
	}
	o, err = parse(t, "# only comments\n", nil)
	if err != nil || o.Workers != 4 {
		t.Fatalf("empty file: %+v %v", o, err)
	}
}

func TestParse_Refusals(t *testing.T) {
	for name, file := range map[string]string{
		"unknown key":           "wrokers: 8\n",
		"old underscore key":    "meta_servers: [a:1]\n",
		"bad yaml":              "workers: [\n",
		"bad value":             "workers: many\n",
		"config names a file":   "config: other.yaml\n",
		"removed flag as a key": "admin-token: secret\n",
	} {
		if _, err := parse(t, file, nil); !errors.Is(err, ErrConfigFile) {
			t.Errorf("%s: %v, want ErrConfigFile", name, err)
		}
	}
	if _, err := parse(t, "wrokers: 8\n", nil); err == nil || !strings.Contains(err.Error(), "wrokers") {
		t.Errorf("the error names the unknown key: %v", err)
	}
	var o testOptions
	if err := Parse(testFlags(&o), []string{"--config", "/nonexistent/q.yaml"}, nil); !errors.Is(err, ErrConfigFile) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := parse(t, "", []string{"QMQ_WORKERS=many"}); !errors.Is(err, ErrEnvironment) || !strings.Contains(err.Error(), "QMQ_WORKERS") {
		t.Errorf("bad environment value: %v", err)
	}
	if _, err := parse(t, "", nil, "positional"); err == nil {
		t.Errorf("a positional argument was accepted")
	}
}

// Environment variables that name no flag, reserved ones (secrets the
// server reads itself) and hidden flags are not taken as flags.
func TestParse_EnvironmentIgnores(t *testing.T) {
	o, err := parse(t, "", []string{"QMQ_NO_SUCH_FLAG=1", "QMQ_ADMIN_TOKEN=secret-token", "QMQ_CONFIG=/x.yaml", "WORKERS=9"})
	if err != nil || o.Removed || o.Workers != 4 {
		t.Fatalf("%+v %v", o, err)
	}
	var o2 testOptions
	s := Server{Name: "t", Flags: testFlags(&o2), Reserved: []string{"QMQ_WORKERS"}}
	if code := s.Execute(nil, []string{"QMQ_WORKERS=9"}, new(bytes.Buffer), new(bytes.Buffer)); code != ExitOK || o2.Workers != 4 {
		t.Fatalf("reserved variable: code %d, %+v", code, o2)
	}
}

func TestServer_VersionHelpAndExitCodes(t *testing.T) {
	buildinfo.Version, buildinfo.Commit = "v1.2.3", "abc1234"
	defer func() { buildinfo.Version, buildinfo.Commit = "", "" }()
	var o testOptions
	ran := false
	s := Server{Name: "qmq-test", Short: "a test server", Flags: testFlags(&o), Run: func() error { ran = true; return nil }}
	var out, errOut bytes.Buffer
	if code := s.Execute([]string{"--version"}, nil, &out, &errOut); code != ExitOK || ran {
		t.Fatalf("--version: code %d ran %v: %s", code, ran, errOut.String())
	}
	if got, want := out.String(), "qmq-test v1.2.3 (commit abc1234, "+runtime.Version(); !strings.HasPrefix(got, want) {
		t.Fatalf("--version printed %q, want prefix %q", got, want)
	}
	out.Reset()
	if code := s.Execute([]string{"-version"}, nil, &out, &errOut); code != ExitOK || ran || !strings.HasPrefix(out.String(), "qmq-test v1.2.3") {
		t.Fatalf("-version: code %d ran %v: %q", code, ran, out.String())
	}
	out.Reset()
	if code := s.Execute([]string{"-help"}, nil, &out, &errOut); code != ExitOK || ran || !strings.Contains(out.String(), "Usage:") {
		t.Fatalf("-help: code %d ran %v", code, ran)
	}
	out.Reset()
	if code := s.Execute([]string{"--help"}, nil, &out, &errOut); code != ExitOK || ran {
		t.Fatalf("--help: code %d", code)
	}
	help := out.String()
	for _, want := range []string{"Usage:\n  qmq-test [flags]", "--addr string", `(default "127.0.0.1:1")`, "--config string", "QMQ_DATA_DIR", "--version"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "admin-token") {
		t.Errorf("--help shows the removed flag:\n%s", help)
	}
	if code := s.Execute([]string{"--addr", "127.0.0.1:9"}, nil, &out, &errOut); code != ExitOK || !ran || o.Addr != "127.0.0.1:9" {
		t.Fatalf("run: code %d ran %v %+v", code, ran, o)
	}
	errOut.Reset()
	if code := s.Execute([]string{"--nosuch"}, nil, &out, &errOut); code != ExitUsage || !strings.HasPrefix(errOut.String(), "qmq-test: ") {
		t.Fatalf("unknown flag: code %d, stderr %q", code, errOut.String())
	}
	ran = false
	if code := s.Execute([]string{"--check-config", "--workers", "7"}, nil, &out, &errOut); code != ExitOK || ran || o.Workers != 7 {
		t.Fatalf("--check-config: code %d ran %v %+v", code, ran, o)
	}
	s.Prepare = func() error { return errors.New("invalid") }
	if code := s.Execute(nil, nil, &out, &errOut); code != ExitUsage {
		t.Fatalf("Prepare failing: code %d", code)
	}
	if code := s.Execute([]string{"--check-config"}, nil, &out, &errOut); code != ExitUsage {
		t.Fatalf("--check-config of invalid options: code %d", code)
	}
	s.Prepare, s.Run = nil, func() error { return errors.New("cannot listen") }
	if code := s.Execute(nil, nil, &out, &errOut); code != ExitRun {
		t.Fatalf("Run failing: code %d", code)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("meta-servers"); got != "QMQ_META_SERVERS" {
		t.Fatalf("EnvName = %q", got)
	}
}

// The Go flag package's single-dash spellings of long flags keep working.
func TestParse_GoFlagSpellings(t *testing.T) {
	o, err := parse(t, "", nil, "-workers", "9", "-addr=127.0.0.1:7", "-sync", "-interval", "-1s")
	if err != nil || o.Workers != 9 || o.Addr != "127.0.0.1:7" || !o.Sync || o.Interval != -time.Second {
		t.Fatalf("%+v %v", o, err)
	}
}
