package gateway_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer/gateway"
)

// postRaw posts body to the raw publish route of subject with the media
// type and headers, and returns the status, headers and answer.
func postRaw(t *testing.T, base, subject, ctype string, body []byte, headers map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/subjects/"+subject+"/publish", bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
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
	return resp.StatusCode, resp.Header, data
}

// pulledBody is a pulled message's body as bytes.
func pulledBody(t *testing.T, m gateway.PulledMessage) string {
	t.Helper()
	if m.BodyEncoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return m.Body
}

// Raw batches: newline-separated bodies and nsqd's binary batch, with the
// headers' tags, properties and delay on every message; an id and a status
// per message, or their count with Prefer: return=minimal.
func TestGateway_RawBatchPublish(t *testing.T) {
	cl := startCluster(t, 30*time.Second, nil)
	code, _, data := postRaw(t, cl.url, "rawb", gateway.MediaTypeLines, []byte("one\ntwo\nthree\n"),
		map[string]string{"QMQ-Tags": "t1,t2", "QMQ-Properties": "k=v"})
	var res gateway.PublishResponse
	if err := json.Unmarshal(data, &res); err != nil || code != 200 || len(res.Results) != 3 {
		t.Fatalf("lines batch answered %d %q", code, data)
	}
	want := map[string]string{}
	for i, r := range res.Results {
		if r.Status != "ok" || r.ID == "" {
			t.Fatalf("result %d: %+v", i, r)
		}
		want[r.ID] = []string{"one", "two", "three"}[i]
	}
	// Binary: any bytes, newlines and an empty body included.
	bodies := [][]byte{[]byte("a\nb"), {}, {0xff, 0, '\n'}}
	sentAt := time.Now()
	code, h, data := postRaw(t, cl.url, "rawb", gateway.MediaTypeBinary+"; charset=binary", gateway.AppendBinaryBatch(nil, bodies...),
		map[string]string{"QMQ-Delay": "1s", "Prefer": "return=minimal"})
	if code != 200 || string(data) != "{\"stored\":3}\n" || h.Get("Preference-Applied") != "return=minimal" {
		t.Fatalf("binary batch answered %d %q", code, data)
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	got := pullUntil(t, cl.url, "rawb", "g", "c1", ids...)
	for id, body := range want {
		m := got[id]
		if pulledBody(t, m) != body || strings.Join(m.Tags, ",") != "t1,t2" || m.Properties["k"] != "v" {
			t.Fatalf("pulled %+v, want body %q with the headers' tags and properties", m, body)
		}
	}
	// The delayed binary batch comes whole, after its delay.
	delayed := map[string]bool{}
	var seen time.Time
	for len(delayed) < len(bodies) && time.Since(sentAt) < 30*time.Second {
		var pr gateway.PullResponse
		if code, _ := call(t, "GET", cl.url+"/v1/subjects/rawb/groups/g/messages?consumer=c1&max=100&wait=1s", nil, &pr); code != 200 {
			t.Fatalf("pull answered %d", code)
		}
		for _, m := range pr.Messages {
			if _, old := want[m.ID]; !old {
				delayed[pulledBody(t, m)] = true
				seen = time.Now()
			}
		}
	}
	for _, b := range bodies {
		if !delayed[string(b)] {
			t.Fatalf("delayed bodies pulled %v, not %q", delayed, b)
		}
	}
	if seen.Sub(sentAt) < time.Second {
		t.Fatalf("the delayed batch came %v after it was sent", seen.Sub(sentAt))
	}
}

// A raw batch that breaks a limit or its format is refused as a whole with
// a problem document, and nothing of it is stored; a message the broker
// refuses gets its own status beside the others'.
func TestGateway_RawBatchBadInput(t *testing.T) {
	cl := startCluster(t, 30*time.Second, func(o *gateway.Options) { o.MaxBodyBytes, o.MaxBatch = 5<<20, 3 })
	lines, bin := gateway.MediaTypeLines, gateway.MediaTypeBinary
	ab := func(bodies ...string) []byte {
		bs := make([][]byte, len(bodies))
		for i, b := range bodies {
			bs[i] = []byte(b)
		}
		return gateway.AppendBinaryBatch(nil, bs...)
	}
	for _, tc := range []struct {
		name, ctype string
		body        []byte
		headers     map[string]string
		code        int
		status      string
		detail      string
	}{
		{"empty lines body", lines, nil, nil, 400, "bad request", "no message"},
		{"only a newline", lines, []byte("\n"), nil, 400, "bad request", "no message"},
		{"an empty line", lines, []byte("a\n\nb"), nil, 400, "bad request", "line 2 is empty"},
		{"lines over the batch limit", lines, []byte("a\nb\nc\nd"), nil, 413, "too large", "4 messages"},
		{"binary over the batch limit", bin, ab("a", "b", "c", "d"), nil, 413, "too large", "4 messages"},
		{"body over the limit", lines, bytes.Repeat([]byte("x"), 5<<20+1), nil, 413, "too large", "limit"},
		{"binary too short", bin, []byte{0, 0}, nil, 400, "bad request", "too short"},
		{"binary count of zero", bin, []byte{0, 0, 0, 0}, nil, 400, "bad request", "count of 0"},
		{"binary truncated", bin, ab("abc", "def")[:14], nil, 400, "bad request", "message 2 of 2"},
		{"binary trailing bytes", bin, append(ab("abc"), 'x'), nil, 400, "bad request", "after the 1 messages"},
		{"an id for a batch", lines, []byte("a\nb"), map[string]string{"QMQ-Id": "x"}, 400, "bad request", "QMQ-Id"},
		{"a schedule key for a batch", bin, ab("a"), map[string]string{"QMQ-Schedule-Key": "k", "QMQ-Delay": "1h"}, 400, "bad request", "QMQ-Schedule-Key"},
		{"bad delay", lines, []byte("a\nb"), map[string]string{"QMQ-Delay": "soon"}, 400, "invalid", "delay"},
		{"bad expiry", lines, []byte("a"), map[string]string{"QMQ-Expire-At": "tomorrow"}, 400, "bad request", "QMQ-Expire-At"},
		{"bad replace", lines, []byte("a"), map[string]string{"QMQ-Replace": "maybe"}, 400, "bad request", "QMQ-Replace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, h, data := postRaw(t, cl.url, "raw.bad", tc.ctype, tc.body, tc.headers)
			var p gateway.Problem
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatalf("answer %d %q: %v", code, data, err)
			}
			problemOf(t, code, h, p, tc.code, tc.status)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("detail %q does not say %q", p.Detail, tc.detail)
			}
			if p.QMQStatus == "invalid" && len(p.Results) != bytes.Count(tc.body, []byte("\n"))+1 {
				t.Fatalf("a batch refused per message lists %d results: %+v", len(p.Results), p.Results)
			}
		})
	}
	// A body over the broker's limit fails alone: 207, the others stored.
	code, _, data := postRaw(t, cl.url, "raw.bad", bin, ab("kept", strings.Repeat("x", 4<<20+1), "kept too"), nil)
	var res gateway.PublishResponse
	if err := json.Unmarshal(data, &res); err != nil || code != 207 || len(res.Results) != 3 ||
		res.Results[0].Status != "ok" || res.Results[1].Status != "too large" || res.Results[2].Status != "ok" {
		t.Fatalf("a batch with a body over the broker's limit answered %d %.300s", code, data)
	}
	got := pullUntil(t, cl.url, "raw.bad", "g", "c1", res.Results[0].ID, res.Results[2].ID)
	// Nothing of the refused batches was stored: one more pull finds nothing new.
	var pr gateway.PullResponse
	call(t, "GET", cl.url+"/v1/subjects/raw.bad/groups/g/messages?consumer=c1&max=100&wait=500ms", nil, &pr)
	if len(got) != 2 || len(pr.Messages) != 0 {
		t.Fatalf("pulled %d then %d messages, want the 2 stored ones only", len(got), len(pr.Messages))
	}
}

// One raw message takes the JSON form's schedule options from headers: a
// schedule key (with replace) and an expiry.
func TestGateway_RawScheduleHeaders(t *testing.T) {
	cl := startCluster(t, 30*time.Second, nil)
	h := map[string]string{"QMQ-Delay": "1h", "QMQ-Schedule-Key": "order-7"}
	if code, _, data := postRaw(t, cl.url, "raw.sched", "text/plain", []byte("first"), h); code != 200 {
		t.Fatalf("keyed publish answered %d %q", code, data)
	}
	if code, _, data := postRaw(t, cl.url, "raw.sched", "text/plain", []byte("second"), h); code != 409 {
		t.Fatalf("a second message with the key answered %d %q, want 409", code, data)
	}
	h["QMQ-Replace"] = "true"
	h["QMQ-Expire-At"] = time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	if code, _, data := postRaw(t, cl.url, "raw.sched", "text/plain", []byte("second"), h); code != 200 {
		t.Fatalf("replace answered %d %q", code, data)
	}
	var res gateway.ScheduleResponse
	if code, _ := call(t, "POST", cl.url+"/v1/subjects/raw.sched/scheduled/cancel",
		gateway.ScheduleRequest{Targets: []gateway.ScheduleTarget{{Key: "order-7"}}}, &res); code != 200 ||
		len(res.Results) != 1 || res.Results[0].Status != "cancelled" {
		t.Fatalf("cancel by the header's key answered %d %+v", code, res)
	}
}
