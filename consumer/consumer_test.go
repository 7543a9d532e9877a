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
	// Doubling from the base up to the max, each wait jittered within half
	// and one and a half times its value (never above the max), and two
	// messages with the same attempts do not all wait alike.
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		seen := map[time.Duration]bool{}
		for range 50 {
			got := s.backoff(i + 1)
			if got < w/2 || got > min(w*3/2, 10*time.Second) {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", i+1, got, w/2, min(w*3/2, 10*time.Second))
			}
			seen[got] = true
		}
		if len(seen) < 5 {
			t.Fatalf("backoff(%d): %d distinct waits in 50, want jitter", i+1, len(seen))
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
