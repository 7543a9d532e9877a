package gateway

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkDecodePublish decodes the gateway suite's publish request: 100
// messages of 256 UTF-8 bytes.
func BenchmarkDecodePublish(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	body := strings.Repeat("x", 256)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"subject":"bench.gw","body":"` + body + `"}`)
	}
	sb.WriteString(`]}`)
	payload := []byte(sb.String())
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/publish", bytes.NewReader(payload))
		w := httptest.NewRecorder()
		var req PublishRequest
		if p := decodeJSON(w, r, 1<<20, &req); p != nil {
			b.Fatal(p)
		}
		if len(req.Messages) != 100 {
			b.Fatal(len(req.Messages))
		}
	}
}
