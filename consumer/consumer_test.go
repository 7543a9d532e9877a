package consumer

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOptions_Validate(t *testing.T) {
	if _, err := New(); !errors.Is(err, ErrNoResolver) {
		t.Fatalf("no resolver: %v", err)
	}
	if _, err := New(WithBrokers("127.0.0.1:1"), WithConsumerID("bad id")); err == nil {
		t.Fatal("bad consumer id accepted")
	}
	c, err := New(WithBrokers("127.0.0.1:1"), WithConsumerID("ok"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	h := func(context.Context, *Message) error { return nil }
	tests := []struct {
		name         string
		subject, grp string
		opts         []SubscribeOption
	}{
		{"bad subject", "a b", "g", nil},
		{"system subject", "%RETRY%a%g", "g", nil},
		{"bad group", "s", "g/1", nil},
		{"zero concurrency", "s", "g", []SubscribeOption{Concurrency(0)}},
		{"batch over max unacked", "s", "g", []SubscribeOption{PullBatch(100), MaxUnacked(10)}},
		{"backoff", "s", "g", []SubscribeOption{RetryBackoff(time.Second, time.Millisecond)}},
	}
	for _, tc := range tests {
		if _, err := c.Subscribe(tc.subject, tc.grp, h, tc.opts...); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := c.Subscribe("s", "g", nil); err == nil {
		t.Error("nil handler accepted")
	}
}

func TestDefaultConsumerID_Stable(t *testing.T) {
	a, b := defaultConsumerID(), defaultConsumerID()
	if a != b || a == "" {
		t.Fatalf("ids %q %q", a, b)
	}
}

func TestBackoff(t *testing.T) {
	s := &Subscription{cfg: subConfig{retryBase: time.Second, retryMax: 10 * time.Second}}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := s.backoff(i + 1); got != w {
			t.Fatalf("backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if d, ok := retryDelay(RetryAfter(3*time.Second, nil)); !ok || d != 3*time.Second {
		t.Fatal("RetryAfter delay lost")
	}
	if _, ok := retryDelay(errors.New("x")); ok {
		t.Fatal("plain error has a delay")
	}
}

func TestMemoryIdempotency(t *testing.T) {
	c := NewMemoryIdempotency(time.Minute)
	m := &Message{ID: "a", Group: "g"}
	ctx := context.Background()
	if ok, _ := c.Begin(ctx, m); !ok {
		t.Fatal("first Begin refused")
	}
	if ok, _ := c.Begin(ctx, m); ok {
		t.Fatal("concurrent Begin allowed")
	}
	c.End(ctx, m, errors.New("failed"))
	if ok, _ := c.Begin(ctx, m); !ok {
		t.Fatal("Begin after a failure refused")
	}
	c.End(ctx, m, nil)
	if ok, _ := c.Begin(ctx, m); ok {
		t.Fatal("Begin after success allowed")
	}
	if ok, _ := c.Begin(ctx, &Message{ID: "a", Group: "other"}); !ok {
		t.Fatal("another group's copy refused")
	}
}
