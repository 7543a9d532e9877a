package realtime

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

// openSeedBroker starts a master on dir with the given dedupe window and
// waits until it has seeded its dedupe table from the log.
func openSeedBroker(t *testing.T, dir string, window time.Duration) *Broker {
	t.Helper()
	o := NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir = "127.0.0.1:0", "", dir
	o.SegmentSize = 8 << 20
	o.DedupeWindow = window
	o.DedupeCapacity = 1 << 14
	b, err := New(o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.cur().dedupeSeeded:
	case <-time.After(10 * time.Second):
		t.Fatal("dedupe seeding did not end")
	}
	return b
}

// seededIDs reads the qmq_realtime_dedupe_seeded_ids gauge.
func seededIDs(t *testing.T, b *Broker) float64 {
	t.Helper()
	var m dto.Metric
	if err := b.metrics.dedupeSeeded.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// sendOne sends raw messages in one request and returns their statuses.
func sendOne(t *testing.T, tc *transport.Client, b *Broker, msgs ...[]byte) []protocol.Status {
	t.Helper()
	resp, err := tc.Call(context.Background(), b.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, msgs))
	if err != nil {
		t.Fatal(err)
	}
	st, err := protocol.DecodeSendResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A master that restarts still knows the ids it stored within the dedupe
// window (read back from its log): a producer's retry of one is answered
// "duplicate", a new id is stored. An id stored before the window is not
// remembered.
func TestBroker_DedupeWindowSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	tc, err := transport.New(transport.Options{RequestTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	encode := func(subject, id string) []byte {
		raw, err := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: id, Body: []byte("x")}, protocol.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	a1, a2, b1 := encode("a", "a-1"), encode("a", "a-2"), encode("b", "b-1")
	const window = time.Hour
	b := openSeedBroker(t, dir, window)
	if st := sendOne(t, tc, b, a1, a2, b1); st[0] != protocol.StatusOK || st[1] != protocol.StatusOK || st[2] != protocol.StatusOK {
		t.Fatalf("first sends: %v", st)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	b = openSeedBroker(t, dir, window)
	if n := seededIDs(t, b); n != 3 {
		t.Fatalf("seeded %v ids, want 3", n)
	}
	st := sendOne(t, tc, b, a2, b1, encode("a", "a-3"))
	if st[0] != protocol.StatusDuplicate || st[1] != protocol.StatusDuplicate || st[2] != protocol.StatusOK {
		t.Fatalf("resends after the restart: %v, want duplicate, duplicate, ok", st)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// With a window shorter than the messages' age nothing is remembered.
	const short = 50 * time.Millisecond
	written := time.Now()
	for time.Since(written) <= 2*short {
		time.Sleep(short)
	}
	b = openSeedBroker(t, dir, short)
	defer b.Close(context.Background())
	if n := seededIDs(t, b); n != 0 {
		t.Fatalf("seeded %v ids older than the window", n)
	}
	if st := sendOne(t, tc, b, a1); st[0] != protocol.StatusOK {
		t.Fatalf("a resend older than the window: %v, want ok (stored again)", st)
	}
}

// remember fills at most half of a generation, so seeding never forces a
// rotation that would drop live ids, and it takes back no room for an id
// already there.
func TestDedupe_RememberLeavesRoomForLiveSends(t *testing.T) {
	d := newDedupe(time.Hour, 1<<12, time.Now)
	s := &d.shards[0]
	seeded := 0
	for i := range s.limit {
		if d.remember(uint64(i+7) | 0<<60) {
			seeded++
		}
	}
	if seeded != s.limit/2 {
		t.Fatalf("remembered %d ids in a shard, want %d (half its generation)", seeded, s.limit/2)
	}
	if !d.remember(7) {
		t.Fatal("an id already remembered was refused")
	}
	if d.reserve(7) || d.reserve(8) {
		t.Fatal("remembered ids are not duplicates")
	}
	if !d.reserve(uint64(s.limit + 100)) {
		t.Fatal("a live send found no room after seeding")
	}
}
