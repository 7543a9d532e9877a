package gateway_test

import (
	"bytes"
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

// call sends a request and decodes the JSON answer into out (when not nil).
func call(t *testing.T, method, url string, body any, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: answer %d %q: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, resp.Header
}

func publish(t *testing.T, base string, msgs ...gateway.PublishMessage) []string {
	t.Helper()
	var res gateway.PublishResponse
	if code, _ := call(t, "POST", base+"/v1/publish", gateway.PublishRequest{Messages: msgs}, &res); code != http.StatusOK {
		t.Fatalf("publish answered %d: %+v", code, res)
	}
	ids := make([]string, len(res.Results))
	for i, r := range res.Results {
		if r.Status != "ok" {
			t.Fatalf("message %d: %+v", i, r)
		}
		ids[i] = r.ID
	}
	return ids
}

// pullUntil pulls as consumerID until every id in want came (or 30 s).
func pullUntil(t *testing.T, base, subject, group, consumerID string, want ...string) map[string]gateway.PulledMessage {
	t.Helper()
	got := map[string]gateway.PulledMessage{}
	testutil.CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		var res gateway.PullResponse
		url := fmt.Sprintf("%s/v1/subjects/%s/groups/%s/messages?consumer=%s&max=100&wait=1s&start=earliest", base, subject, group, consumerID)
		if code, _ := call(t, "GET", url, nil, &res); code != http.StatusOK {
			return fmt.Errorf("pull answered %d", code)
		}
		for _, m := range res.Messages {
			got[m.ID] = m
		}
		for _, id := range want {
			if _, ok := got[id]; !ok {
				return fmt.Errorf("pulled %d messages, not yet %s", len(got), id)
			}
		}
		return nil
	})
	return got
}

func problemOf(t *testing.T, code int, h http.Header, p gateway.Problem, wantCode int, wantStatus string) {
	t.Helper()
	if code != wantCode || h.Get("Content-Type") != "application/problem+json" || p.QMQStatus != wantStatus || p.Detail == "" {
		t.Fatalf("answer %d %q %+v, want %d problem %q", code, h.Get("Content-Type"), p, wantCode, wantStatus)
	}
}

// Bad input gets a clear problem document and loses nothing: malformed
// JSON, unknown fields, an oversized body, a batch over the limit, a pull
// waiting past the limit, an ack of an unknown id; the message published
// before all of them is still pulled once and acked.
func TestGateway_BadInput(t *testing.T) {
	cl := startCluster(t, 30*time.Second, func(o *gateway.Options) { o.MaxBodyBytes, o.MaxBatch = 64<<10, 10 })
	ids := publish(t, cl.url, gateway.PublishMessage{Subject: "bad.input", Body: "keep me"})
	pubURL := cl.url + "/v1/publish"
	pulls := cl.url + "/v1/subjects/bad.input/groups/g"
	for _, tc := range []struct {
		name, method, url string
		body              any
		code              int
		status            string
		detail            string
	}{
		{"malformed JSON", "POST", pubURL, `{"messages": [`, 400, "bad request", "malformed JSON"},
		{"trailing data", "POST", pubURL, `{"messages": []} {}`, 400, "bad request", "after the document"},
		{"unknown field", "POST", pubURL, `{"messages": [{"subject": "bad.input", "body": "x", "colour": "red"}]}`, 400, "bad request", "colour"},
		{"empty batch", "POST", pubURL, `{"messages": []}`, 400, "bad request", "at least one"},
		{"oversized body", "POST", pubURL, `{"messages": [{"subject": "bad.input", "body": "` + strings.Repeat("x", 70<<10) + `"}]}`, 413, "too large", "limit"},
		{"batch over the limit", "POST", pubURL, gateway.PublishRequest{Messages: make([]gateway.PublishMessage, 11)}, 413, "too large", "limit is 10"},
		{"bad subject", "POST", pubURL, `{"messages": [{"subject": "a b", "body": "x"}]}`, 400, "invalid", "subject"},
		{"system subject", "POST", pubURL, `{"messages": [{"subject": "%RETRY%a%g", "body": "x"}]}`, 400, "invalid", "subject"},
		{"bad base64", "POST", pubURL, `{"messages": [{"subject": "bad.input", "body": "!!", "bodyEncoding": "base64"}]}`, 400, "invalid", "base64"},
		{"delay and deliverAt", "POST", pubURL, `{"messages": [{"subject": "bad.input", "body": "x", "delay": "1s", "deliverAt": "2030-01-01T00:00:00Z"}]}`, 400, "invalid", "not both"},
		{"wait past the limit", "GET", pulls + "/messages?consumer=c1&wait=1h", nil, 400, "bad request", "limit"},
		{"no consumer id", "GET", pulls + "/messages", nil, 400, "bad request", "consumer"},
		{"max past the limit", "GET", pulls + "/messages?consumer=c1&max=100000", nil, 400, "bad request", "max"},
		{"unknown query parameter", "GET", pulls + "/messages?consumer=c1&colour=red", nil, 400, "bad request", "colour"},
		{"ack with no session", "POST", pulls + "/ack", `{"consumer": "nobody", "ids": ["x"]}`, 404, "not found", "no session"},
		{"unknown route", "GET", cl.url + "/v1/nothing", nil, 404, "not found", "no route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p gateway.Problem
			code, h := call(t, tc.method, tc.url, tc.body, &p)
			problemOf(t, code, h, p, tc.code, tc.status)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("detail %q does not say %q", p.Detail, tc.detail)
			}
		})
	}
	got := pullUntil(t, cl.url, "bad.input", "g", "c1", ids[0])
	if got[ids[0]].Body != "keep me" || len(got) != 1 {
		t.Fatalf("pulled %+v", got)
	}
	var p gateway.Problem
	code, h := call(t, "POST", pulls+"/ack", gateway.AckRequest{Consumer: "c1", IDs: []string{ids[0], "no-such-id"}}, &p)
	problemOf(t, code, h, p, 404, "not found")
	if len(p.Unknown) != 1 || p.Unknown[0] != "no-such-id" {
		t.Fatalf("unknown ids %v", p.Unknown)
	}
	// The known id was acked: acking it again names it unknown.
	code, h = call(t, "POST", pulls+"/ack", gateway.AckRequest{Consumer: "c1", IDs: []string{ids[0]}}, &p)
	problemOf(t, code, h, p, 404, "not found")
}

// A consumer id that stops pulling and acking hands its messages back to
// the group after the gateway's consumer timeout: another consumer of the
// group gets them.
func TestGateway_IdleConsumerHandsBack(t *testing.T) {
	cl := startCluster(t, 30*time.Second, func(o *gateway.Options) { o.ConsumerTimeout = time.Second })
	ids := publish(t, cl.url,
		gateway.PublishMessage{Subject: "idle", Body: "one"},
		gateway.PublishMessage{Subject: "idle", Body: "two"})
	first := pullUntil(t, cl.url, "idle", "g", "quitter", ids...)
	if len(first) != 2 {
		t.Fatalf("pulled %d", len(first))
	}
	start := time.Now()
	pullUntil(t, cl.url, "idle", "g", "heir", ids...)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("the messages went to the other consumer after %v, before the quitter's timeout", d)
	}
	var p gateway.Problem
	code, h := call(t, "POST", cl.url+"/v1/subjects/idle/groups/g/ack", gateway.AckRequest{Consumer: "quitter", IDs: ids}, &p)
	problemOf(t, code, h, p, 404, "not found")
}

// Raw publish: the body as is, tags, properties and a delay in headers.
func TestGateway_RawPublishAndStream(t *testing.T) {
	cl := startCluster(t, 30*time.Second, nil)
	req, _ := http.NewRequest("POST", cl.url+"/v1/subjects/raw/publish", bytes.NewReader([]byte{0xff, 0xfe, 0}))
	req.Header.Set("QMQ-Tags", "a,b")
	req.Header.Set("QMQ-Properties", "k=v&x=y")
	req.Header.Set("QMQ-Id", "my-own-id-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var res gateway.PublishResponse
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(res.Results) != 1 || res.Results[0].ID != "my-own-id-1" {
		t.Fatalf("raw publish answered %d %+v", resp.StatusCode, res)
	}
	// The stream: server-sent events with the same acks.
	resp, err = http.Get(cl.url + "/v1/subjects/raw/groups/g/stream?consumer=s1&start=earliest&wait=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type %q", ct)
	}
	buf := make([]byte, 0, 4096)
	deadline := time.Now().Add(30 * time.Second)
	var m gateway.PulledMessage
	for time.Now().Before(deadline) {
		chunk := make([]byte, 1024)
		n, err := resp.Body.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if i := bytes.Index(buf, []byte("data: ")); i >= 0 {
			if j := bytes.Index(buf[i:], []byte("\n\n")); j > 0 {
				if err := json.Unmarshal(buf[i+6:i+j], &m); err != nil {
					t.Fatalf("event %q: %v", buf[i:i+j], err)
				}
				break
			}
		}
		if err != nil {
			t.Fatalf("stream ended: %v (%q)", err, buf)
		}
	}
	if m.ID != "my-own-id-1" || m.BodyEncoding != "base64" || m.Body != "//4A" || m.Properties["k"] != "v" || len(m.Tags) != 2 {
		t.Fatalf("streamed %+v", m)
	}
	var ack gateway.AckResponse
	if code, _ := call(t, "POST", cl.url+"/v1/subjects/raw/groups/g/ack", gateway.AckRequest{Consumer: "s1", IDs: []string{m.ID}}, &ack); code != 200 || ack.Done != 1 {
		t.Fatalf("ack of a streamed message answered %d %+v", code, ack)
	}
}

// Close ends a long poll at once (it answers, empty), and hands the
// messages its consumers held back to the group at once: a consumer on
// another gateway gets them long before the brokers' consumer timeout.
func TestGateway_CloseHandsBack(t *testing.T) {
	cl := startCluster(t, time.Minute, nil)
	ids := publish(t, cl.url,
		gateway.PublishMessage{Subject: "closing", Body: "one"},
		gateway.PublishMessage{Subject: "closing", Body: "two"})
	pullUntil(t, cl.url, "closing", "g", "leaver", ids...)
	pollDone := make(chan int, 1)
	go func() {
		resp, err := http.Get(cl.url + "/v1/subjects/closing/groups/g/messages?consumer=leaver&wait=30s")
		if err != nil {
			pollDone <- -1
			return
		}
		resp.Body.Close()
		pollDone <- resp.StatusCode
	}()
	other := startGateway(t, []string{cl.meta.Addr().String()}, nil)
	testutil.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		resp, err := http.Get(cl.url + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(data), "\nqmq_gateway_long_polls 1\n") {
			return fmt.Errorf("the long poll has not reached the gateway")
		}
		return nil
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.gateway.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if code := <-pollDone; code != http.StatusOK {
		t.Fatalf("the long poll in flight answered %d", code)
	}
	pullUntil(t, other.URL(), "closing", "g", "stayer", ids...)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the messages came back after %v: not handed back at close", d)
	}
}

// With Prefer: return=minimal a publish whose messages are all stored
// answers their count, and they are stored as any others; one with a
// failed message still answers 207 with every message's status.
func TestGateway_PublishMinimal(t *testing.T) {
	cl := startCluster(t, 30*time.Second, nil)
	post := func(body gateway.PublishRequest) (int, http.Header, []byte) {
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", cl.url+"/v1/publish", bytes.NewReader(data))
		req.Header.Set("Prefer", "respond-async, return=minimal")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	code, h, b := post(gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "min", ID: "min-1", Body: "a"}, {Subject: "min", ID: "min-2", Body: "b"}, {Subject: "min", ID: "min-3", Body: "c"},
	}})
	if code != 200 || string(b) != "{\"stored\":3}\n" || h.Get("Preference-Applied") != "return=minimal" {
		t.Fatalf("minimal publish answered %d %q (%v)", code, b, h)
	}
	pullUntil(t, cl.url, "min", "g", "c1", "min-1", "min-2", "min-3")

	code, h, b = post(gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "min", ID: "min-4", Body: "d"}, {Subject: "a b", ID: "min-5", Body: "bad subject"},
	}})
	var res gateway.PublishResponse
	if err := json.Unmarshal(b, &res); err != nil || code != 207 || h.Get("Preference-Applied") != "" ||
		len(res.Results) != 2 || res.Results[0].Status != "ok" || res.Results[1].Status != "invalid" {
		t.Fatalf("minimal publish with a bad message answered %d %q (%v)", code, b, err)
	}
}
