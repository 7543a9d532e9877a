package consumer

import (
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// pulledMessages encodes n messages as a pull response would carry them;
// every third has tags and properties.
func pulledMessages(t testing.TB, n int) []protocol.PulledMessage {
	var items []protocol.PulledMessage
	for i := range n {
		m := &protocol.Message{Subject: "s", ID: fmt.Sprintf("id-%d", i), Body: []byte(fmt.Sprintf("body %d", i)),
			Created: time.UnixMilli(int64(1000 + i)), Attempts: uint16(i % 3)}
		if i%3 == 0 {
			m.Tags = []string{"t1", fmt.Sprintf("t-%d", i)}
			m.Properties = []protocol.Property{{Key: "k", Value: fmt.Sprint(i)}}
		}
		raw, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, protocol.PulledMessage{PullSeq: uint64(10 + i), Message: raw})
	}
	return items
}

func TestPullBatch_Build(t *testing.T) {
	p := &puller{s: &Subscription{subject: "s", group: "g"}, lg: zap.NewNop()}
	items := pulledMessages(t, 7)
	items[4].Message = append([]byte(nil), items[4].Message...)
	items[4].Message[len(items[4].Message)-1] ^= 1 // corrupt: CRC mismatch
	var b pullBatch
	ds := b.build(p, items, "bg")
	if len(ds) != len(items) {
		t.Fatalf("%d deliveries for %d messages", len(ds), len(items))
	}
	for i := range ds {
		d := &ds[i]
		if d.p != p || d.pullSeq != uint64(10+i) {
			t.Fatalf("delivery %d: puller %p seq %d", i, d.p, d.pullSeq)
		}
		if i == 4 {
			if d.msg != nil {
				t.Fatal("corrupt message built")
			}
			continue
		}
		m := d.msg
		if m == nil || m.delivery != d {
			t.Fatalf("message %d not linked to its delivery", i)
		}
		if m.ID != fmt.Sprintf("id-%d", i) || string(m.Body) != fmt.Sprintf("body %d", i) || m.Subject != "s" ||
			m.Group != "g" || m.BrokerGroup != "bg" || m.Attempts != i%3 || m.Created.UnixMilli() != int64(1000+i) || !m.DeliverAt.IsZero() {
			t.Fatalf("message %d: %+v", i, m)
		}
		if i%3 != 0 {
			if m.Tags != nil || m.Properties != nil {
				t.Fatalf("message %d: tags %q properties %v", i, m.Tags, m.Properties)
			}
			continue
		}
		if len(m.Tags) != 2 || m.Tags[0] != "t1" || m.Tags[1] != fmt.Sprintf("t-%d", i) {
			t.Fatalf("message %d tags %q", i, m.Tags)
		}
		if v, ok := m.Property("k"); !ok || v != fmt.Sprint(i) || len(m.Properties) != 1 {
			t.Fatalf("message %d properties %v", i, m.Properties)
		}
	}
	// A handler appending to its message's tags must not overwrite the
	// next message's (they share one slice).
	ds[0].msg.Tags = append(ds[0].msg.Tags, "extra")
	ds[0].msg.Properties = append(ds[0].msg.Properties, protocol.Property{Key: "x", Value: "y"})
	if ds[3].msg.Tags[0] != "t1" || ds[3].msg.Properties[0].Key != "k" {
		t.Fatalf("appending to one message's fields changed the next: %q %v", ds[3].msg.Tags, ds[3].msg.Properties)
	}
}

// TestPullBatch_Allocations: a pull's messages cost a fixed number of
// allocations, not some per message.
func TestPullBatch_Allocations(t *testing.T) {
	p := &puller{s: &Subscription{subject: "s", group: "g"}, lg: zap.NewNop()}
	items := pulledMessages(t, 64)
	var b pullBatch
	b.build(p, items, "bg") // grow the scratch
	// deliveries, strings, tags, properties
	if allocs := testing.AllocsPerRun(50, func() { b.build(p, items, "bg") }); allocs > 4 {
		t.Fatalf("%v allocations for a pull of %d messages, want at most 4", allocs, len(items))
	}
}

func BenchmarkPullBatch_Build(b *testing.B) {
	p := &puller{s: &Subscription{subject: "s", group: "g"}, lg: zap.NewNop()}
	items := pulledMessages(b, 64)
	var pb pullBatch
	b.ReportAllocs()
	for b.Loop() {
		pb.build(p, items, "bg")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/msg")
}
