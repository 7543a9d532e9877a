package opsserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServer_Endpoints(t *testing.T) {
	var ready atomic.Bool
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	lvl := zap.NewAtomicLevel()
	s := New(Options{Registry: reg, Level: &lvl, Ready: func() error {
		if !ready.Load() {
			return errors.New("replaying logs")
		}
		return nil
	}}, nil)
	s.Handle("GET /extra", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("x")) }))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	base := "http://" + s.Addr().String()
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "replaying logs") {
		t.Fatalf("readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz after ready: %d", code)
	}
	if _, body := get(t, base+"/metrics"); !strings.Contains(body, "qmq_test_total 3") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics missing: %.200s", body)
	}
	if _, body := get(t, base+"/extra"); body != "x" {
		t.Fatal("extra route")
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/loglevel", strings.NewReader(`{"level":"debug"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("loglevel put: %v", err)
	}
	if lvl.Level() != zap.DebugLevel {
		t.Fatal("level unchanged")
	}
}

func TestReadiness(t *testing.T) {
	var r Readiness
	if r.Err() == nil || r.Ready() {
		t.Fatal("ready before SetReady")
	}
	r.SetReady()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	r.SetClosing()
	if r.Err() == nil || !r.Closing() {
		t.Fatal("ready while closing")
	}
}
