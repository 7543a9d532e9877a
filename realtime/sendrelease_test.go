package realtime_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/realtime"
)

// releaseBody is the body of message i of batch b sent by sender g: its
// bytes tell where it came from, so a body stored or delivered from a
// buffer another frame has overwritten shows.
func releaseBody(g, b, i, size int) []byte {
	body := bytes.Repeat([]byte{byte(g*31 + b*7 + i)}, size)
	copy(body, fmt.Sprintf("g%d-b%d-m%d|", g, b, i))
	return body
}

// A send request larger than the server's read buffer arrives in a frame
// buffer of netserver's pool, which the send handler gives back
// (netserver.Request.Release) once the store holds the messages and the
// reply is encoded. Test binaries poison a released buffer (fill it with
// 0xdb), so a body read after its release, by the store, a reply, the
// dedupe check or the slave's copy, would be stored, delivered or answered
// corrupt. Large batches from concurrent senders, under each flush policy,
// with bodies the store copies (1 KiB) and bodies it writes from where they
// are (4 KiB: pwritev), with the reply waiting for a slave, and with
// duplicates and an invalid message in the batch, must all come back
// intact, and the pool must have been given buffers back.
func TestSend_LargeBatchesReleaseTheirFrames(t *testing.T) {
	cases := []struct {
		name      string
		size, per int
		slave     bool
		mutate    func(*realtime.Options)
	}{
		{name: "sync 1k", size: 1 << 10, per: 200},
		{name: "async 1k", size: 1 << 10, per: 200, mutate: func(o *realtime.Options) { o.Flush = "async" }},
		{name: "sync 4k", size: 4 << 10, per: 40},
		{name: "async 4k", size: 4 << 10, per: 40, mutate: func(o *realtime.Options) { o.Flush = "async" }},
		{name: "wait for the slave 4k", size: 4 << 10, per: 40, slave: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slave && testing.Short() {
				t.Skip("starts a master and a slave")
			}
			mutate := []func(*realtime.Options){func(o *realtime.Options) { o.MaxBody = 16 << 10 }}
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			if tc.slave {
				mutate = append(mutate, replOptions, func(o *realtime.Options) { o.WaitSlave = true })
			}
			b := startBroker(t, t.TempDir(), mutate...)
			if tc.slave {
				startSlave(t, t.TempDir(), b.addr())
			}
			checkReleasedFrames(t, b, tc.size, tc.per)
		})
	}
}

// checkReleasedFrames sends batches of per messages of size bytes from
// four senders at once, each batch with a duplicate of its first message
// and an invalid message at its end, checks every answer, reads every
// message back and checks its body, and checks that the broker's frame
// pool holds buffers given back.
func checkReleasedFrames(t *testing.T, b *testBroker, size, per int) {
	const senders, batches = 4, 6
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for bn := range batches {
				var msgs [][]byte
				for i := range per {
					id := fmt.Sprintf("g%d-b%d-m%d", g, bn, i)
					body := releaseBody(g, bn, i, size)
					m, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "rel", ID: id, Body: body, Created: time.Now()}, protocol.DefaultLimits)
					if err != nil {
						errs <- err
						return
					}
					msgs = append(msgs, m)
					mu.Lock()
					want[id] = body
					mu.Unlock()
				}
				bad := append([]byte(nil), msgs[1]...)
				bad[len(bad)-1] ^= 0xff // its CRC no longer matches
				msgs = append(msgs, msgs[0], bad)
				req := protocol.AppendSendRequest(nil, 0, msgs)
				if len(req) <= 64<<10 {
					errs <- fmt.Errorf("a request of %d bytes is not a large frame", len(req))
					return
				}
				resp, err := c.Call(ctx, b.addr(), protocol.CmdSend, req)
				if err != nil {
					errs <- fmt.Errorf("sender %d batch %d: %w", g, bn, err)
					return
				}
				st, err := protocol.DecodeSendResponse(resp)
				if err != nil {
					errs <- err
					return
				}
				for i, s := range st[:per] {
					if s != protocol.StatusOK {
						errs <- fmt.Errorf("sender %d batch %d message %d: %v", g, bn, i, s)
						return
					}
				}
				if dup, inv := st[per], st[per+1]; dup == protocol.StatusOK || inv == protocol.StatusOK {
					errs <- fmt.Errorf("sender %d batch %d: duplicate answered %v, invalid message %v", g, bn, dup, inv)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var got sync.Map
	con := newConsumer(t, "c1", b.addr())
	if _, err := con.Subscribe("rel", "check", func(_ context.Context, m *consumer.Message) error {
		got.Store(m.ID, append([]byte(nil), m.Body...))
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		missing := 0
		for id := range want {
			if _, ok := got.Load(id); !ok {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d messages not delivered", missing, len(want))
		}
		return nil
	})
	for id, body := range want {
		v, _ := got.Load(id)
		if d := v.([]byte); !bytes.Equal(d, body) {
			t.Fatalf("message %s delivered with a body of %d bytes starting %q, want %d starting %q", id, len(d), d[:min(16, len(d))], len(body), body[:16])
		}
	}
	if pooled := framePoolBytes(t, b); pooled <= 0 {
		t.Fatalf("the broker's frame pool holds %v bytes: the send handler gave no buffer back", pooled)
	}
}

// framePoolBytes reads the broker's qmq_realtime_frame_pool_bytes gauge.
func framePoolBytes(t *testing.T, b *testBroker) float64 {
	t.Helper()
	mfs, err := b.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "qmq_realtime_frame_pool_bytes" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no qmq_realtime_frame_pool_bytes metric")
	return 0
}
