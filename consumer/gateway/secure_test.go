package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer/gateway"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/tlstest"
	"github.com/qmq-go/qmq/realtime"
)

// The gateway passes a request's bearer credential on to the cluster, over
// TLS, as a native client presents it: the right secret publishes and
// consumes, a wrong one is refused by the cluster (401 problem), and with
// RequireCredentials a request without one never reaches it.
func TestGateway_CredentialsPassedOn(t *testing.T) {
	ro := realtime.NewOptions()
	ro.Addr, ro.HTTPAddr, ro.DataDir, ro.SegmentSize = "127.0.0.1:0", "", t.TempDir(), 8<<20
	rt, err := realtime.New(ro, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	pk := tlstest.New(t)
	front := tlstest.StartFront(t, rt.Addr().String(), pk.ServerConfig(), map[string]string{"billing": "s3cret"})
	o := gateway.NewOptions()
	o.Addr, o.Brokers, o.RequireCredentials = "127.0.0.1:0", []string{front.Addr}, true
	o.BrokerTLSConfig = pk.ClientConfig(tlsconfig.Files{})
	g, err := gateway.New(o, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })

	do := func(method, path, authz, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, g.URL()+path, strings.NewReader(body))
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s: %q: %v", path, data, err)
			}
		}
		return resp.StatusCode
	}
	const msg = `{"messages":[{"subject":"secure","body":"paid"}]}`
	var p gateway.Problem
	if code := do("POST", "/v1/publish", "", msg, &p); code != 401 || p.QMQStatus != "unauthenticated" {
		t.Fatalf("no credential: %d %+v", code, p)
	}
	p = gateway.Problem{}
	if code := do("POST", "/v1/publish", "Bearer billing:wrong", msg, &p); code != 401 || p.QMQStatus != "unauthenticated" {
		t.Fatalf("wrong secret: %d %+v", code, p)
	}
	var res gateway.PublishResponse
	if code := do("POST", "/v1/publish", "Bearer billing:s3cret", msg, &res); code != 200 {
		t.Fatalf("right secret: %d %+v", code, res)
	}
	var pulled gateway.PullResponse
	testutil.CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		if code := do("GET", "/v1/subjects/secure/groups/g/messages?consumer=c1&start=earliest&wait=1s", "Bearer billing:s3cret", "", &pulled); code != 200 {
			t.Fatalf("pull: %d", code)
		}
		if len(pulled.Messages) == 0 {
			return io.EOF
		}
		return nil
	})
	if pulled.Messages[0].Body != "paid" {
		t.Fatalf("pulled %+v", pulled)
	}
	if front.BySecret.Load() < 1 || front.Refused.Load() < 1 {
		t.Fatalf("front: %d by secret, %d refused", front.BySecret.Load(), front.Refused.Load())
	}
}
