package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap/zaptest"
)

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func testOptions() Options {
	return Options{
		SegmentSize:        8 << 20,
		ActionSegmentSize:  1 << 20,
		CheckpointInterval: -1,
		RetentionInterval:  -1,
		RetentionAge:       -1,
	}
}

func openStore(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func encode(t testing.TB, subject, id string, body []byte, tags ...string) []byte {
	t.Helper()
	b, err := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: id, Body: body, Tags: tags, Created: time.UnixMilli(1)}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendAll(t testing.TB, s *Store, msgs ...[]byte) []Result {
	t.Helper()
	res, err := s.Append(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	return res
}

// appendN appends n messages to subject with ids prefix-i.
func appendN(t testing.TB, s *Store, subject, prefix string, n int) [][]byte {
	t.Helper()
	var msgs [][]byte
	for i := 0; i < n; i++ {
		msgs = append(msgs, encode(t, subject, fmt.Sprintf("%s-%d", prefix, i), []byte(fmt.Sprintf("body %s %d", prefix, i))))
	}
	for i := 0; i < len(msgs); i += 50 {
		appendAll(t, s, msgs[i:min(i+50, len(msgs))]...)
	}
	return msgs
}

func msgID(t testing.TB, b []byte) string {
	t.Helper()
	v, err := protocol.ParseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(v.ID)
}

// appendRaw is AppendAsync for encoded messages, checked as Append checks
// them (Views).
func appendRaw(s *Store, msgs [][]byte, done func([]Result), opts ...AppendOption) error {
	views, results := Views(msgs, s.opts.Limits)
	return s.AppendAsync(views, results, done, opts...)
}
