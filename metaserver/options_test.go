package metaserver

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/config"
)

func TestOptions_Validate(t *testing.T) {
	t.Parallel()
	if o := NewOptions(); o.Validate() != nil {
		t.Fatalf("defaults invalid: %v", o.Validate())
	}
	bad := map[string]func(*Options){
		"empty addr":      func(o *Options) { o.Addr = "" },
		"prefix no slash": func(o *Options) { o.Prefix = "qmq" },
		"prefix root":     func(o *Options) { o.Prefix = "/" },
		"short ttl":       func(o *Options) { o.BrokerTTL = 10 * time.Millisecond },
		"no groups":       func(o *Options) { o.MinGroups = 0 },
		"bad log level":   func(o *Options) { o.Log.Level = "loud" },
		"negative conns":  func(o *Options) { o.Limits.MaxConns = -1 },
	}
	for name, mod := range bad {
		o := NewOptions()
		mod(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := NewOptions()
	if _, err := New(o, nil); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New without etcd endpoints: err %v, want ErrInvalidOptions", err)
	}
}

func TestOptions_FileAndFlags(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "meta.yaml")
	yaml := "etcd-endpoints: [a:1, b:2]\nmin-groups: 3\nbroker-ttl: 4s\nprefix: /other/\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := config.Parse(fs, []string{"--config", path, "--min-groups", "5", "--etcd-endpoints", "x:1, y:2"}, nil); err != nil {
		t.Fatal(err)
	}
	if o.MinGroups != 5 || o.BrokerTTL != 4*time.Second || o.Prefix != "/other/" || len(o.EtcdEndpoints) != 2 || o.EtcdEndpoints[1] != "y:2" {
		t.Fatalf("parsed %+v", o)
	}
}

func TestOptions_ConnectionBoundFlags(t *testing.T) {
	t.Parallel()
	o := NewOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.AddFlags(fs)
	args := []string{"--max-conns", "50", "--max-conns-per-identity", "5", "--max-partial-bytes", "1048576",
		"--idle-timeout", "30s", "--min-read-rate", "100", "--read-rate-window", "5s"}
	if err := config.Parse(fs, args, nil); err != nil {
		t.Fatal(err)
	}
	l := o.Limits
	if l.MaxConns != 50 || l.MaxConnsPerIdentity != 5 || l.MaxPartialBytes != 1<<20 ||
		l.IdleTimeout != 30*time.Second || l.MinReadRate != 100 || l.ReadRateWindow != 5*time.Second {
		t.Fatalf("parsed %+v", l)
	}
}
