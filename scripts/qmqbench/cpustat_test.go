package main

import (
	"runtime"
	"testing"
)

func TestCPUSplit(t *testing.T) {
	a := cpuTimes{busy: 100, idle: 50, iowait: 10, steal: 5}
	b := cpuTimes{busy: 160, idle: 70, iowait: 10, steal: 25}
	if got, want := cpuSplit(a, b), "busy 60%, idle 20%, iowait 0%, steal 20%"; got != want {
		t.Fatalf("cpuSplit = %q, want %q", got, want)
	}
	if got := cpuSplit(a, a); got != "no ticks" {
		t.Fatalf("cpuSplit of no time = %q", got)
	}
}

func TestReadCPUTimes(t *testing.T) {
	c, ok := readCPUTimes()
	if runtime.GOOS != "linux" {
		if ok {
			t.Fatal("read /proc/stat off Linux")
		}
		return
	}
	if !ok || c.busy+c.idle == 0 {
		t.Fatalf("readCPUTimes = %+v, %v", c, ok)
	}
}
