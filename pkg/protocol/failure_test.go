package protocol

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRecordFailureReplacesEarlierAndKeepsOthers(t *testing.T) {
	m := &Message{Subject: "orders", ID: "m1", Properties: []Property{{Key: "order", Value: "42"}}}
	at := time.UnixMilli(1_700_000_000_123)
	RecordFailure(m, Failure{Error: "first", FailedAt: at})
	RecordFailure(m, Failure{Error: "db down", FailedAt: at.Add(time.Second), DeadWhy: "16 attempts failed"})
	if v, _ := m.Property("order"); v != "42" {
		t.Fatalf("order property lost: %v", m.Properties)
	}
	if len(m.Properties) != 4 {
		t.Fatalf("properties %v: want order and three failure properties", m.Properties)
	}
	f, ok := FailureOf(m.Properties)
	if !ok || f.Error != "db down" || !f.FailedAt.Equal(at.Add(time.Second)) || f.DeadWhy != "16 attempts failed" {
		t.Fatalf("FailureOf = %+v, %v", f, ok)
	}
	raw, err := AppendMessage(nil, m, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := FailureOf(back.Properties); g != f {
		t.Fatalf("after a round trip: %+v, want %+v", g, f)
	}
}

func TestFailureTextIsBounded(t *testing.T) {
	m := &Message{}
	RecordFailure(m, Failure{Error: strings.Repeat("é", MaxFailureText)})
	v, _ := m.Property(PropError)
	if len(v) > MaxFailureText || !utf8.ValidString(v) || !strings.HasSuffix(v, "…") {
		t.Fatalf("cut text: %d bytes, valid %v, tail %q", len(v), utf8.ValidString(v), v[len(v)-5:])
	}
	if _, ok := FailureOf(nil); ok {
		t.Fatal("FailureOf of no properties reports a failure")
	}
}
