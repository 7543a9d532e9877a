package main

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestAckLogMaxGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	l := &ackLog{acks: [][]time.Time{
		{at(-500), at(100), at(200), at(900), at(1000)}, // 700 ms between 200 and 900
		{at(50), at(1500)}, // its last ack inside the window is at 50: 950 ms to the end at 1000
	}}
	if got, want := l.maxGap(at(0), at(1000)), 950*time.Millisecond; got != want {
		t.Fatalf("maxGap = %v, want %v", got, want)
	}
	if got, want := l.maxGap(at(0), at(800)), 750*time.Millisecond; got != want {
		t.Fatalf("maxGap up to 800 ms = %v, want %v (sender 1: 50 to the end)", got, want)
	}
	empty := &ackLog{acks: [][]time.Time{nil}}
	if got, want := empty.maxGap(at(0), at(300)), 300*time.Millisecond; got != want {
		t.Fatalf("maxGap of a sender without acks = %v, want the whole window %v", got, want)
	}
}

func TestGroupNodeMetrics(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# HELP x\n# TYPE x counter\n"+
			`qmq_failover_elections_total{group="g",how="campaign",kind="realtime",outcome="won"} 2`+"\n"+
			`qmq_failover_elections_total{group="g",how="takeover",kind="realtime",outcome="won"} 1`+"\n"+
			"qmq_realtime_role 1\n")
	})}
	go srv.Serve(l)
	defer srv.Close()
	n := &groupNode{name: "n", kind: "realtime", http: l.Addr().String()}
	m, err := n.metrics()
	if err != nil {
		t.Fatal(err)
	}
	if m["qmq_failover_elections_total"] != 3 || m[`qmq_failover_elections_total{group="g",how="takeover",kind="realtime",outcome="won"}`] != 1 {
		t.Fatalf("series not summed by name or kept by line: %v", m)
	}
	if v, err := n.metric(n.role()); err != nil || v != 1 {
		t.Fatalf("role = %v, %v", v, err)
	}
	if _, err := n.metric("qmq_missing"); err == nil {
		t.Fatal("a missing series read without an error")
	}
}
