package producer

import (
	"context"
	"testing"
)

// BenchmarkSend is one message in flight: Send after Send, as the sync
// bench suite does, against the fake broker.
func BenchmarkSend(b *testing.B) {
	fb := startFakeBroker(b)
	p, err := New(WithBrokers(fb.addr()))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	body := make([]byte, 256)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Send(ctx, &Message{Subject: "bench.sync", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
}
