package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type testOptions struct {
	Meta     []string      `yaml:"meta"`
	Addr     string        `yaml:"addr"`
	Workers  int           `yaml:"workers"`
	Interval time.Duration `yaml:"interval"`
	Sync     bool          `yaml:"sync"`
}

func parse(t *testing.T, file string, args ...string) (testOptions, error) {
	t.Helper()
	o := testOptions{Addr: "127.0.0.1:1", Workers: 4, Interval: time.Second}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.StringVar(&o.Addr, "addr", o.Addr, "")
	fs.IntVar(&o.Workers, "workers", o.Workers, "")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "")
	fs.BoolVar(&o.Sync, "sync", o.Sync, "")
	StringList(fs, &o.Meta, "meta", "")
	if file != "" {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", p}, args...)
	}
	err := Parse(fs, args, &o)
	return o, err
}

func TestParse_Precedence(t *testing.T) {
	o, err := parse(t, "")
	if err != nil || o.Workers != 4 || o.Addr != "127.0.0.1:1" {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	o, err = parse(t, "workers: 8\naddr: 127.0.0.1:2\ninterval: 5s\nsync: true\n")
	if err != nil || o.Workers != 8 || o.Addr != "127.0.0.1:2" || o.Interval != 5*time.Second || !o.Sync {
		t.Fatalf("file: %+v %v", o, err)
	}
	o, err = parse(t, "workers: 8\naddr: 127.0.0.1:2\n", "--workers=16")
	if err != nil || o.Workers != 16 || o.Addr != "127.0.0.1:2" {
		t.Fatalf("flag over file: %+v %v", o, err)
	}
	o, err = parse(t, "")
	if err != nil || o.Workers != 4 {
		t.Fatalf("empty file: %+v %v", o, err)
	}
}

func TestParse_ListFlags(t *testing.T) {
	o, err := parse(t, "meta: [a:1, b:2]\n")
	if err != nil || len(o.Meta) != 2 {
		t.Fatalf("file list: %+v %v", o, err)
	}
	o, err = parse(t, "meta: [a:1, b:2]\n", "--meta=c:3,d:4", "--meta", "e:5")
	if err != nil || len(o.Meta) != 3 || o.Meta[0] != "c:3" || o.Meta[2] != "e:5" {
		t.Fatalf("flags replace the file's list: %+v %v", o.Meta, err)
	}
	if got := configArg([]string{"-x", "--config=a.yaml"}); got != "a.yaml" {
		t.Fatalf("configArg = %q", got)
	}
	if got := configArg([]string{"pos", "--config", "a.yaml"}); got != "" {
		t.Fatalf("configArg after a positional = %q", got)
	}
}

func TestParse_BadFiles(t *testing.T) {
	if _, err := parse(t, "wrokers: 8\n"); !errors.Is(err, ErrConfigFile) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := parse(t, "workers: [\n"); !errors.Is(err, ErrConfigFile) {
		t.Fatalf("bad yaml: %v", err)
	}
	o := testOptions{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := Parse(fs, []string{"--config", "/nonexistent/q.yaml"}, &o); !errors.Is(err, ErrConfigFile) {
		t.Fatalf("missing file: %v", err)
	}
}
