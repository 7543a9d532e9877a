package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer/gateway"
)

// openAPIDoc is the part of an OpenAPI 3 document the test reads.
type openAPIDoc struct {
	Paths      map[string]map[string]*operation `json:"paths"`
	Components struct {
		Schemas map[string]any `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	OperationID string `json:"operationId"`
	RequestBody *struct {
		Content map[string]struct {
			Schema any `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema any `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// TestOpenAPI_MatchesGateway keeps openapi.json true: the running gateway
// serves the committed document; its operations are exactly the gateway's
// routes; and every operation, called for real on a whole cluster, answers
// only documented status codes and content types, with bodies (and the
// test's request bodies) valid under the documented schemas, strictly (no
// undocumented fields).
func TestOpenAPI_MatchesGateway(t *testing.T) {
	committed, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(committed, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for path, methods := range doc.Paths {
		for m := range methods {
			ops = append(ops, strings.ToUpper(m)+" "+path)
		}
	}
	routes := gateway.Routes()
	sort.Strings(ops)
	sort.Strings(routes)
	if !slices.Equal(ops, routes) {
		t.Fatalf("openapi.json documents %v, the gateway serves %v", ops, routes)
	}

	cl := startCluster(t, 30*time.Second, func(o *gateway.Options) { o.MaxBatch = 5 })
	v := &apiChecker{t: t, doc: &doc, base: cl.url, seen: map[string]bool{}}

	served := v.do("GET", "/openapi.json", "/openapi.json", "", nil, nil, 200)
	if !bytes.Equal(served, committed) {
		t.Fatal("/openapi.json differs from the committed openapi.json")
	}
	v.do("GET", "/healthz", "/healthz", "", nil, nil, 200)
	v.do("GET", "/readyz", "/readyz", "", nil, nil, 200)
	v.do("GET", "/metrics", "/metrics", "", nil, nil, 200)

	const pub = "/v1/publish"
	ok := v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "text", Tags: []string{"a"}, Properties: map[string]string{"k": "v"}},
		{Subject: "api", Body: "AAE=", BodyEncoding: "base64", Delay: "600ms"},
	}}, nil, 200)
	var res gateway.PublishResponse
	json.Unmarshal(ok, &res)
	minimal := map[string]string{"Prefer": "return=minimal"}
	if b := v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "counted"}, {Subject: "api", Body: "counted too"},
	}}, minimal, 200); string(b) != `{"stored":2}`+"\n" {
		t.Fatalf("publish with Prefer: return=minimal answered %q", b)
	}
	v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "fine"}, {Subject: "a b", Body: "bad subject"},
	}}, minimal, 207)
	v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "fine"}, {Subject: "a b", Body: "bad subject"},
	}}, nil, 207)
	v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{{Subject: "a b", Body: "x"}}}, nil, 400)
	v.do("POST", pub, pub, "application/json", `{"messages": [`, nil, 400)
	v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: make([]gateway.PublishMessage, 6)}, nil, 413)

	const raw = "/v1/subjects/{subject}/publish"
	v.do("POST", raw, "/v1/subjects/api/publish", "application/octet-stream", []byte("raw body"), map[string]string{"QMQ-Tags": "a,b"}, 200)
	v.do("POST", raw, "/v1/subjects/api/publish", "application/octet-stream", []byte("raw body"), map[string]string{"Prefer": "return=minimal"}, 200)
	v.do("POST", raw, "/v1/subjects/api/publish", "application/octet-stream", []byte("x"), map[string]string{"QMQ-Delay": "soon"}, 400)
	// Raw batches: newline-separated bodies and nsqd's binary batch.
	if b := v.do("POST", raw, "/v1/subjects/api/publish", gateway.MediaTypeLines, []byte("one\ntwo\n"), map[string]string{"QMQ-Tags": "a"}, 200); !bytes.Contains(b, []byte(`"results"`)) {
		t.Fatalf("a lines batch answered %q", b)
	}
	if b := v.do("POST", raw, "/v1/subjects/api/publish", gateway.MediaTypeBinary, gateway.AppendBinaryBatch(nil, []byte("a\nb"), nil), minimal, 200); string(b) != `{"stored":2}`+"\n" {
		t.Fatalf("a binary batch with Prefer: return=minimal answered %q", b)
	}
	v.do("POST", raw, "/v1/subjects/api/publish", gateway.MediaTypeLines, []byte("one\n\ntwo"), nil, 400)
	v.do("POST", raw, "/v1/subjects/api/publish", gateway.MediaTypeBinary, []byte{0, 0, 0, 1, 0, 0, 0, 9, 'x'}, nil, 400)
	v.do("POST", raw, "/v1/subjects/api/publish", gateway.MediaTypeLines, []byte("1\n2\n3\n4\n5\n6"), nil, 413)
	v.do("POST", raw, "/v1/subjects/a%20b/publish", gateway.MediaTypeLines, []byte("1\n2"), nil, 400)
	keyed := map[string]string{"QMQ-Delay": "1h", "QMQ-Schedule-Key": "api-raw-key"}
	v.do("POST", raw, "/v1/subjects/api/publish", "text/plain", []byte("keyed"), keyed, 200)
	v.do("POST", raw, "/v1/subjects/api/publish", "text/plain", []byte("keyed again"), keyed, 409)
	v.do("POST", raw, "/v1/subjects/api/publish", gateway.MediaTypeLines, []byte("1\n2"), keyed, 400)

	const msgs = "/v1/subjects/{subject}/groups/{group}/messages"
	want := map[string]bool{}
	for _, r := range res.Results {
		want[r.ID] = true
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		var pr gateway.PullResponse
		json.Unmarshal(v.do("GET", msgs, "/v1/subjects/api/groups/g/messages?consumer=c1&max=10&wait=1s&start=earliest", "", nil, nil, 200), &pr)
		for _, m := range pr.Messages {
			delete(want, m.ID)
		}
	}
	if len(want) > 0 {
		t.Fatalf("never pulled %v", want)
	}
	v.do("GET", msgs, "/v1/subjects/api/groups/g/messages?consumer=c1&wait=1y", "", nil, nil, 400)

	const stream = "/v1/subjects/{subject}/groups/{group}/stream"
	v.do("GET", stream, "/v1/subjects/api/groups/g/stream?consumer=c2&wait=100ms", "", nil, nil, 200)
	v.do("GET", stream, "/v1/subjects/api/groups/g/stream?max=0&consumer=c2", "", nil, nil, 400)

	for _, verb := range []string{"ack", "nack"} {
		op := "/v1/subjects/{subject}/groups/{group}/" + verb
		url := "/v1/subjects/api/groups/g/" + verb
		id := res.Results[0].ID
		if verb == "nack" {
			id = res.Results[1].ID
		}
		v.do("POST", op, url, "application/json", gateway.AckRequest{Consumer: "c1", IDs: []string{id}}, nil, 200)
		v.do("POST", op, url, "application/json", gateway.AckRequest{Consumer: "c1", IDs: []string{id}}, nil, 404)
		v.do("POST", op, url, "application/json", `{"consumer": "c1"}`, nil, 400)
	}
	// A delayed message with a schedule key, rescheduled, cancelled, then
	// gone; bad targets are refused whole.
	expire := time.Now().Add(time.Hour)
	v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "later", Delay: "10m", ScheduleKey: "k1", ExpireAt: &expire},
	}}, nil, 200)
	if b := v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "again", Delay: "10m", ScheduleKey: "k1"},
	}}, nil, 409); !strings.Contains(string(b), "key exists") {
		t.Fatalf("a second pending k1: %s", b)
	}
	v.do("POST", pub, pub, "application/json", gateway.PublishRequest{Messages: []gateway.PublishMessage{
		{Subject: "api", Body: "replaced", Delay: "10m", ScheduleKey: "k1", Replace: true},
	}}, nil, 200)
	const cancelOp, rescheduleOp = "/v1/subjects/{subject}/scheduled/cancel", "/v1/subjects/{subject}/scheduled/reschedule"
	answer := func(b []byte) string {
		var sr gateway.ScheduleResponse
		if err := json.Unmarshal(b, &sr); err != nil || len(sr.Results) != 1 {
			t.Fatalf("schedule answer %s: %v", b, err)
		}
		return sr.Results[0].Status
	}
	if st := answer(v.do("POST", rescheduleOp, "/v1/subjects/api/scheduled/reschedule", "application/json",
		gateway.ScheduleRequest{Targets: []gateway.ScheduleTarget{{Key: "k1", Delay: "20m"}}}, nil, 200)); st != "rescheduled" {
		t.Fatalf("reschedule: %s", st)
	}
	v.do("POST", rescheduleOp, "/v1/subjects/api/scheduled/reschedule", "application/json",
		gateway.ScheduleRequest{Targets: []gateway.ScheduleTarget{{Key: "k1"}}}, nil, 400)
	if st := answer(v.do("POST", cancelOp, "/v1/subjects/api/scheduled/cancel", "application/json",
		gateway.ScheduleRequest{Targets: []gateway.ScheduleTarget{{Key: "k1"}}}, nil, 200)); st != "cancelled" {
		t.Fatalf("cancel: %s", st)
	}
	if st := answer(v.do("POST", cancelOp, "/v1/subjects/api/scheduled/cancel", "application/json",
		gateway.ScheduleRequest{Targets: []gateway.ScheduleTarget{{Key: "k1"}}}, nil, 200)); st != "cancelled" {
		t.Fatalf("cancel again (the answer stays cancelled): %s", st)
	}
	if st := answer(v.do("POST", cancelOp, "/v1/subjects/api/scheduled/cancel", "application/json",
		gateway.ScheduleRequest{Targets: []gateway.ScheduleTarget{{ID: "no-such-id"}}}, nil, 200)); st != "not found" {
		t.Fatalf("cancel of an unknown id: %s", st)
	}
	v.do("POST", cancelOp, "/v1/subjects/api/scheduled/cancel", "application/json", `{"targets": [{}]}`, nil, 400)
	v.do("POST", cancelOp, "/v1/subjects/api/scheduled/cancel", "application/json",
		gateway.ScheduleRequest{Targets: make([]gateway.ScheduleTarget, 6)}, nil, 413)

	for _, r := range routes {
		if !v.seen[r] {
			t.Errorf("route %s was not exercised", r)
		}
	}
}

type apiChecker struct {
	t    *testing.T
	doc  *openAPIDoc
	base string
	seen map[string]bool
}

// do calls url as operation (method, path), checks the request body (JSON
// ones) and the answer against the document and returns the answer body.
func (c *apiChecker) do(method, path, url, contentType string, body any, headers map[string]string, wantCode int) []byte {
	t := c.t
	t.Helper()
	op := c.doc.Paths[path][strings.ToLower(method)]
	if op == nil {
		t.Fatalf("%s %s is not documented", method, path)
	}
	c.seen[method+" "+path] = true
	var data []byte
	switch b := body.(type) {
	case nil:
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		data, _ = json.Marshal(b)
		var generic any
		json.Unmarshal(data, &generic)
		if op.RequestBody == nil {
			t.Fatalf("%s %s documents no request body", method, path)
		}
		if err := c.validate(op.RequestBody.Content[contentType].Schema, generic, "request"); err != nil {
			t.Fatalf("%s %s: the test's request does not fit the document: %v", method, path, err)
		}
	}
	if data != nil && contentType != "" {
		if op.RequestBody == nil {
			t.Fatalf("%s %s documents no request body", method, path)
		}
		_, exact := op.RequestBody.Content[contentType]
		_, any := op.RequestBody.Content["*/*"]
		if !exact && !any {
			t.Fatalf("%s %s: request media type %q is not documented (%v)", method, path, contentType, keys(op.RequestBody.Content))
		}
	}
	req, _ := http.NewRequest(method, c.base+url, bytes.NewReader(data))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []byte
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	if ct == "text/event-stream" {
		// Read until the first keep-alive comment, then hang up.
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil || strings.HasPrefix(line, ":") {
				break
			}
		}
	} else if got, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprint(resp.StatusCode)
	if resp.StatusCode != wantCode {
		t.Fatalf("%s %s answered %s %q, want %d", method, url, code, got, wantCode)
	}
	r, ok := op.Responses[code]
	if !ok {
		t.Fatalf("%s %s answered %s, not documented", method, path, code)
	}
	media, ok := r.Content[ct]
	if !ok {
		t.Fatalf("%s %s answered %s with %q, documented %v", method, path, code, ct, keys(r.Content))
	}
	if strings.Contains(ct, "json") {
		var generic any
		if err := json.Unmarshal(got, &generic); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v", method, path, err)
		}
		if err := c.validate(media.Schema, generic, "answer"); err != nil {
			t.Fatalf("%s %s %s: answer %s does not fit the document: %v", method, path, code, got, err)
		}
	}
	return got
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// validate checks v against the subset of JSON Schema openapi.json uses:
// $ref, oneOf, type, required, properties, additionalProperties, items,
// enum, minItems, maxItems, pattern and format date-time.
func (c *apiChecker) validate(schema, v any, at string) error {
	s, ok := schema.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: schema %v is not an object", at, schema)
	}
	if alts, ok := s["oneOf"].([]any); ok {
		var errs []string
		for _, alt := range alts {
			if err := c.validate(alt, v, at); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(alts)-len(errs) != 1 {
			return fmt.Errorf("%s: fits %d of the %d oneOf schemas (%s)", at, len(alts)-len(errs), len(alts), strings.Join(errs, "; "))
		}
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		target, ok := c.doc.Components.Schemas[name]
		if !ok {
			return fmt.Errorf("%s: no schema %s", at, ref)
		}
		return c.validate(target, v, at)
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v not in %v", at, v, enum)
	}
	switch s["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %T, want an object", at, v)
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range asSlice(s["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: required %q missing", at, r)
			}
		}
		for k, fv := range obj {
			if ps, ok := props[k]; ok {
				if err := c.validate(ps, fv, at+"."+k); err != nil {
					return err
				}
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: undocumented field %q", at, k)
				}
			case map[string]any:
				if err := c.validate(ap, fv, at+"."+k); err != nil {
					return err
				}
			case nil:
				if props != nil {
					return fmt.Errorf("%s: undocumented field %q (schema must say additionalProperties)", at, k)
				}
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %T, want an array", at, v)
		}
		if n, ok := s["minItems"].(float64); ok && len(arr) < int(n) {
			return fmt.Errorf("%s: %d items, fewer than %v", at, len(arr), n)
		}
		if n, ok := s["maxItems"].(float64); ok && len(arr) > int(n) {
			return fmt.Errorf("%s: %d items, more than %v", at, len(arr), n)
		}
		for i, item := range arr {
			if err := c.validate(s["items"], item, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %T, want a string", at, v)
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return fmt.Errorf("%s: %q is not a date-time", at, str)
			}
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", at, str, p)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Errorf("%s: %v, want an integer", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %T, want a boolean", at, v)
		}
	case nil:
	default:
		return fmt.Errorf("%s: schema type %v unsupported by the checker", at, s["type"])
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
