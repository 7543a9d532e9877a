package logging

import (
	"flag"
	"testing"

	"go.uber.org/zap"
)

func TestNew_Levels(t *testing.T) {
	for _, dev := range []bool{false, true} {
		lg, lvl, err := New(Options{Level: "warn", Dev: dev})
		if err != nil {
			t.Fatal(err)
		}
		if lg.Core().Enabled(zap.InfoLevel) || !lg.Core().Enabled(zap.WarnLevel) {
			t.Fatalf("dev=%v: level not applied", dev)
		}
		lvl.SetLevel(zap.DebugLevel)
		if !lg.Core().Enabled(zap.DebugLevel) {
			t.Fatal("level did not change at run time")
		}
	}
	if _, _, err := New(Options{Level: "loud"}); err == nil {
		t.Fatal("bad level accepted")
	}
}

func TestAddFlags(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--log-level=debug", "--dev"}); err != nil {
		t.Fatal(err)
	}
	if o.Level != "debug" || !o.Dev {
		t.Fatalf("flags not bound: %+v", o)
	}
	if OrNop(nil) == nil {
		t.Fatal("OrNop(nil) returned nil")
	}
}
