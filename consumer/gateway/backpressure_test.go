package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer/gateway"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// Past MaxInFlight messages being published, a publish is refused at once
// with 429, Retry-After and a "busy" problem; a publish the cluster cannot
// take before the send timeout is a 503 "unavailable" problem naming each
// message.
func TestGateway_BackPressure(t *testing.T) {
	o := gateway.NewOptions()
	o.Addr, o.Brokers = "127.0.0.1:0", []string{testutil.ReusableAddr(t)} // nobody listens there
	o.MaxBatch, o.MaxInFlight, o.SendTimeout = 2, 2, 3*time.Second
	g, err := gateway.New(o, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	const two = `{"messages":[{"subject":"bp","body":"a"},{"subject":"bp","body":"b"}]}`
	type answer struct {
		code int
		p    gateway.Problem
		h    http.Header
	}
	first := make(chan answer, 1)
	go func() { // no t.Fatal off the test goroutine: failures show as code 0
		var a answer
		resp, err := http.Post(g.URL()+"/v1/publish", "application/json", strings.NewReader(two))
		if err == nil {
			a.code, a.h = resp.StatusCode, resp.Header
			json.NewDecoder(resp.Body).Decode(&a.p)
			resp.Body.Close()
		}
		first <- a
	}()
	testutil.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		resp, err := http.Get(g.URL() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(data), "\nqmq_gateway_publishing_messages 2\n") {
			return fmt.Errorf("the first publish is not in flight yet")
		}
		return nil
	})
	var p gateway.Problem
	code, h := call(t, "POST", g.URL()+"/v1/publish", `{"messages":[{"subject":"bp","body":"c"}]}`, &p)
	problemOf(t, code, h, p, http.StatusTooManyRequests, "busy")
	if h.Get("Retry-After") != "1" || p.RetryAfterSeconds != 1 {
		t.Fatalf("429 without Retry-After: %q %+v", h.Get("Retry-After"), p)
	}
	a := <-first
	problemOf(t, a.code, a.h, a.p, http.StatusServiceUnavailable, "unavailable")
	if len(a.p.Results) != 2 || a.p.Results[0].Status != "unavailable" || a.h.Get("Retry-After") == "" {
		t.Fatalf("503 problem %+v", a.p)
	}
}
