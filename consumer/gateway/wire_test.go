package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// appendPulled writes what encoding/json writes for pulledMessage.
func TestAppendPulled_MatchesEncodingJSON(t *testing.T) {
	created := time.Date(2026, 12, 2, 13, 0, 0, 123456789, time.FixedZone("x", 3600))
	msgs := []*consumer.Message{
		{ID: "01ABC", Subject: "s", Body: []byte("plain"), Created: created, BrokerGroup: "rt1"},
		{ID: "id\"q", Subject: "s.t", Tags: []string{"a", "b<c>&"}, Body: []byte("line\nbreak \"quoted\" \\ é ✓ \u2028"),
			Properties: []protocol.Property{{Key: "z", Value: "1"}, {Key: "a", Value: "tab\t"}},
			Created:    created, DeliverAt: created.Add(time.Hour), Attempts: 3, BrokerGroup: "rt2"},
		{ID: "bin", Subject: "s", Body: []byte{0xff, 0, 1}, Created: created, BrokerGroup: "rt1"},
		{ID: "empty", Subject: "s", Body: nil, Created: created, BrokerGroup: "rt1"},
	}
	for _, enc := range []string{"", encodingUTF8, encodingBase64} {
		for _, m := range msgs {
			want, _ := json.Marshal(pulledMessage(m, enc))
			got := appendPulled(nil, m, enc)
			var a, b any
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("%s: invalid JSON %s: %v", m.ID, got, err)
			}
			json.Unmarshal(want, &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("encoding %q, message %s:\n got %s\nwant %s", enc, m.ID, got, want)
			}
		}
	}
}

// appendJSONString writes what encoding/json writes, wherever in the
// 8-byte words the byte needing an escape falls.
func TestAppendJSONString_MatchesEncodingJSON(t *testing.T) {
	for _, special := range []string{`"`, `\`, "\n", "\x00", "\x1f", "<", ">", "&", "é", "\u2028", "\x7f", "\xff", "a"} {
		for n := range 20 {
			for _, s := range []string{strings.Repeat("x", n) + special, special + strings.Repeat("y", n), strings.Repeat("z", n) + special + strings.Repeat("w", n)} {
				want, _ := json.Marshal(s)
				if got := appendJSONString(nil, s); string(got) != string(want) {
					t.Fatalf("%q: got %s, want %s", s, got, want)
				}
			}
		}
	}
}
