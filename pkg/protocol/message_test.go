package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleMessage() *Message {
	return &Message{
		Subject:    "order.changed",
		ID:         "01JDX3YQ4W6V1Z2A7B8C9D0E1F",
		Tags:       []string{"hotel", "vip"},
		Properties: []Property{{"k1", "v1"}, {"trace", strings.Repeat("x", 70000)}},
		Body:       []byte("hello, queue"),
		Created:    time.UnixMilli(1_700_000_000_123),
		DeliverAt:  time.UnixMilli(1_700_000_060_000),
		Attempts:   3,
	}
}

func TestMessage_RoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  *Message
	}{
		{"full", sampleMessage()},
		{"minimal", &Message{Subject: "s", ID: "i"}},
		{"system subject", &Message{Subject: RetrySubject("a.b", "g-1"), ID: "x", Body: []byte{0}}},
		{"empty body with tags", &Message{Subject: "s", ID: "i", Tags: []string{"t"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := AppendMessage(nil, tc.msg, DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tc.msg.EncodedSize() {
				t.Fatalf("EncodedSize %d, encoded %d bytes", tc.msg.EncodedSize(), len(b))
			}
			got, err := DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			want := *tc.msg
			if len(want.Body) == 0 {
				want.Body = nil
			}
			if len(got.Body) == 0 {
				got.Body = nil
			}
			if !reflect.DeepEqual(got, &want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, &want)
			}
			v, err := ParseMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			if string(v.Subject) != tc.msg.Subject || string(v.ID) != tc.msg.ID || v.TagCount() != len(tc.msg.Tags) {
				t.Fatalf("view fields wrong: %q %q %d", v.Subject, v.ID, v.TagCount())
			}
			for _, tag := range tc.msg.Tags {
				if !v.HasTag([]byte(tag)) {
					t.Fatalf("HasTag(%q) = false", tag)
				}
			}
			if v.HasTag([]byte("absent")) {
				t.Fatal("HasTag(absent) = true")
			}
			if err := DefaultLimits.CheckView(&v); err != nil {
				t.Fatalf("CheckView: %v", err)
			}
		})
	}
}

// TestMessage_DeliverAtRoundsUp: a DeliverAt between two milliseconds is
// encoded as the later one (a message is never due early); created and a
// whole millisecond keep their value.
func TestMessage_DeliverAtRoundsUp(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		at   time.Time
		want time.Time
	}{
		{base, base},
		{base.Add(time.Nanosecond), base.Add(time.Millisecond)},
		{base.Add(999 * time.Microsecond), base.Add(time.Millisecond)},
	} {
		b, err := AppendMessage(nil, &Message{Subject: "s", ID: "i", Created: tc.at, DeliverAt: tc.at}, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if !got.DeliverAt.Equal(tc.want) || !got.Created.Equal(base) {
			t.Fatalf("DeliverAt %v: decoded DeliverAt %v (want %v), Created %v (want %v)",
				tc.at.Sub(base), got.DeliverAt.Sub(base), tc.want.Sub(base), got.Created.Sub(base), 0)
		}
	}
}

func TestMessage_AppendKeepsPrefix(t *testing.T) {
	prefix := []byte("prefix")
	b, err := AppendMessage(append([]byte(nil), prefix...), sampleMessage(), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, prefix) {
		t.Fatal("prefix lost")
	}
	if _, err := ParseMessage(b[len(prefix):]); err != nil {
		t.Fatal(err)
	}
}

func TestParseMessage_DetectsEveryFlippedByte(t *testing.T) {
	m := sampleMessage()
	m.Properties[1].Value = "short"
	b, err := AppendMessage(nil, m, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := ParseMessage(c); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
}

func TestParseMessage_Truncated(t *testing.T) {
	b, _ := AppendMessage(nil, sampleMessage(), DefaultLimits)
	for n := 0; n < len(b); n++ {
		if _, err := ParseMessageNoCRC(b[:n]); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMessageVersion) {
			t.Fatalf("prefix of %d bytes: err %v, want ErrTruncated", n, err)
		}
	}
	if _, err := ParseMessageNoCRC(append(b, 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func TestLimits_CheckMessage(t *testing.T) {
	long := strings.Repeat("a", 201)
	tests := []struct {
		name   string
		mutate func(m *Message)
		status Status
	}{
		{"empty subject", func(m *Message) { m.Subject = "" }, StatusInvalid},
		{"long subject", func(m *Message) { m.Subject = long }, StatusInvalid},
		{"bad subject char", func(m *Message) { m.Subject = "a/b" }, StatusInvalid},
		{"space in subject", func(m *Message) { m.Subject = "a b" }, StatusInvalid},
		{"malformed system subject", func(m *Message) { m.Subject = "%RETRY%a" }, StatusInvalid},
		{"unknown system kind", func(m *Message) { m.Subject = "%FOO%a%b" }, StatusInvalid},
		{"empty id", func(m *Message) { m.ID = "" }, StatusInvalid},
		{"too many tags", func(m *Message) { m.Tags = make([]string, 11); fill(m.Tags) }, StatusInvalid},
		{"empty tag", func(m *Message) { m.Tags = []string{""} }, StatusInvalid},
		{"long tag", func(m *Message) { m.Tags = []string{strings.Repeat("t", 65)} }, StatusInvalid},
		{"empty property key", func(m *Message) { m.Properties = []Property{{"", "v"}} }, StatusInvalid},
		{"body too large", func(m *Message) { m.Body = make([]byte, 4<<20+1) }, StatusTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := sampleMessage()
			tc.mutate(m)
			_, err := AppendMessage(nil, m, DefaultLimits)
			var pe *Error
			if !errors.As(err, &pe) || pe.Status != tc.status {
				t.Fatalf("err %v, want status %v", err, tc.status)
			}
		})
	}
}

func fill(tags []string) {
	for i := range tags {
		tags[i] = "t" + string(rune('a'+i))
	}
}

func TestLimits_CheckViewMatchesCheckMessage(t *testing.T) {
	// Encode with generous limits, check with the defaults: the server must
	// reject what a misbehaving client encoded past the limits.
	loose := DefaultLimits
	loose.MaxBody, loose.MaxTags = 8<<20, 20
	m := sampleMessage()
	m.Body = make([]byte, 4<<20+1)
	b, err := AppendMessage(nil, m, loose)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := DefaultLimits.CheckView(&v); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized body: %v", err)
	}
	m = sampleMessage()
	m.Tags = make([]string, 12)
	fill(m.Tags)
	b, _ = AppendMessage(nil, m, loose)
	v, _ = ParseMessage(b)
	if err := DefaultLimits.CheckView(&v); !errors.Is(err, ErrInvalid) {
		t.Fatalf("too many tags: %v", err)
	}
}

// CheckView of a message to a plain subject allocates nothing (a broker
// checks every message it stores), and still judges subjects as
// CheckSubject does: system subjects pass, bad names and lengths do not.
func TestLimits_CheckViewSubjects(t *testing.T) {
	view := func(subject string) View {
		t.Helper()
		m := sampleMessage()
		m.Subject = subject
		b, err := AppendMessage(nil, m, Limits{MaxSubject: 1000, MaxID: 128, MaxTags: 10, MaxTag: 100, MaxProperties: 100, MaxPropertyBytes: 1 << 20, MaxBody: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		v, err := ParseMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	plain := view("order.changed")
	if allocs := testing.AllocsPerRun(100, func() {
		if err := DefaultLimits.CheckView(&plain); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("CheckView of a plain subject allocated %.0f times", allocs)
	}
	retry := view(RetrySubject("order.changed", "billing"))
	if err := DefaultLimits.CheckView(&retry); err != nil {
		t.Fatalf("retry subject: %v", err)
	}
	for _, bad := range []string{"bad subject", "%not.system", string(make([]byte, DefaultLimits.MaxSubject+1))} {
		v := view("a")
		v.Subject = []byte(bad)
		if err := DefaultLimits.CheckView(&v); !errors.Is(err, ErrInvalid) {
			t.Errorf("subject %q: %v", bad, err)
		}
	}
}

func TestSystemSubjects(t *testing.T) {
	s := RetrySubject("order.changed", "billing")
	kind, subject, group, ok := ParseSystemSubject(s)
	if !ok || kind != KindRetry || subject != "order.changed" || group != "billing" {
		t.Fatalf("ParseSystemSubject(%q) = %q %q %q %v", s, kind, subject, group, ok)
	}
	if RealSubject(DeadSubject("a", "b")) != "a" || RealSubject("plain") != "plain" {
		t.Fatal("RealSubject")
	}
	if err := DefaultLimits.CheckSubject(s); err == nil {
		t.Fatal("CheckSubject accepted a system subject from a user")
	}
}

func TestConsumerID(t *testing.T) {
	if err := CheckConsumerID("host-1@1234:worker.2"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a b", "a/b", strings.Repeat("x", 256)} {
		if err := CheckConsumerID(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("CheckConsumerID(%q) = %v", bad, err)
		}
	}
}

func BenchmarkAppendMessage256(b *testing.B) {
	m := &Message{Subject: "bench.subject", ID: "01JDX3YQ4W6V1Z2A7B8C9D0E1F", Body: make([]byte, 256), Created: time.Now()}
	buf := make([]byte, 0, 512)
	b.SetBytes(int64(m.EncodedSize()))
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendMessage(buf[:0], m, DefaultLimits)
	}
}

func BenchmarkParseMessage256(b *testing.B) {
	m := &Message{Subject: "bench.subject", ID: "01JDX3YQ4W6V1Z2A7B8C9D0E1F", Tags: []string{"a"}, Body: make([]byte, 256), Created: time.Now()}
	raw, _ := AppendMessage(nil, m, DefaultLimits)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMessage(raw); err != nil {
			b.Fatal(err)
		}
	}
}
