// Command delaypeer measures a peer's delayed delivery the way qmqbench's
// delay suite measures ours: it publishes -count messages, each due a delay
// uniform in [-min, -max] after its send, consumes them in the same process
// and prints one JSON line with the lateness (time received − due time)
// percentiles and the number of deliveries before their due time.
//
//	nsq:  DPUB (go-nsq DeferredPublishAsync) to one topic; a channel created
//	      before publishing and given nsqd's 5 s queue scan refresh to be
//	      picked up. The due time nsqd uses is receive time + delay: the
//	      tool takes lateness against ack time + delay (no earlier than
//	      nsqd's own, so never more than the true lateness; with at most 200
//	      DPUBs unanswered, the ack follows nsqd's receipt closely) and
//	      counts a delivery early against send time + delay (no later than
//	      nsqd's).
//	nats: JetStream (file storage) stream with allow_msg_schedules; each
//	      message is a schedule "Nats-Schedule: @at <RFC3339>" on its own
//	      subject sched.<n> (one pending schedule per subject), targeting the
//	      subject "due" in the same stream, consumed by a durable consumer on
//	      "due" with explicit acks. The due time is exact.
//
// Usage: delaypeer -system nsq|nats -addr HOST:PORT [-http HOST:PORT] -count N -min 5s -max 65s
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nsqio/go-nsq"
)

// result matches qmqbench's latenessResult.
type result struct {
	System     string  `json:"system"`
	Published  int64   `json:"published"`
	Received   int64   `json:"received"`
	Duplicates int64   `json:"duplicates"`
	Early      int64   `json:"early"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	PublishS   float64 `json:"publish_s"`
	// LastUnixNano is when the last first-delivery arrived.
	LastUnixNano int64 `json:"last_unix_nano"`
}

// tracker records, per message index, its due times and its receipts.
type tracker struct {
	mu        sync.Mutex
	earliest  []int64 // unix nanos before which a delivery is early
	due       []int64 // unix nanos lateness is measured against
	got       []bool
	lateness  []int64 // microseconds, first deliveries
	res       result
	published atomic.Int64
	done      chan struct{}
}

func newTracker(system string, n int) *tracker {
	return &tracker{earliest: make([]int64, n), due: make([]int64, n), got: make([]bool, n),
		lateness: make([]int64, 0, n), res: result{System: system}, done: make(chan struct{})}
}

// receive records message i delivered at now.
func (t *tracker) receive(i int, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i < 0 || i >= len(t.got) {
		return
	}
	ns := now.UnixNano()
	if ns < t.earliest[i] {
		t.res.Early++
	}
	if t.got[i] {
		t.res.Duplicates++
		return
	}
	t.got[i] = true
	t.lateness = append(t.lateness, (ns-t.due[i])/1000)
	t.res.LastUnixNano = ns
	if len(t.lateness) == len(t.got) {
		close(t.done)
	}
}

func (t *tracker) finish(published int64) result {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.res
	r.Published = published
	r.Received = int64(len(t.lateness))
	l := t.lateness
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	if len(l) > 0 {
		at := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))]) / 1000 }
		r.P50Ms, r.P99Ms, r.MaxMs = at(0.5), at(0.99), float64(l[len(l)-1])/1000
	}
	return r
}

func main() {
	system := flag.String("system", "", "nsq or nats")
	addr := flag.String("addr", "", "nsqd TCP address or NATS address")
	httpAddr := flag.String("http", "", "nsqd HTTP address (to create the topic and channel)")
	count := flag.Int("count", 100_000, "messages")
	minDelay := flag.Duration("min", 5*time.Second, "shortest delay")
	maxDelay := flag.Duration("max", 65*time.Second, "longest delay")
	size := flag.Int("size", 64, "body size (at least 8)")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up waiting for deliveries after")
	flag.Parse()
	var (
		r   result
		err error
	)
	o := opts{addr: *addr, http: *httpAddr, n: *count, min: *minDelay, max: *maxDelay, size: max(*size, 8), timeout: *timeout}
	switch *system {
	case "nsq":
		r, err = runNSQ(o)
	case "nats":
		r, err = runNATS(o)
	default:
		err = fmt.Errorf("-system must be nsq or nats")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "delaypeer:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

type opts struct {
	addr, http string
	n          int
	min, max   time.Duration
	size       int
	timeout    time.Duration
}

func (o opts) delays() []time.Duration {
	rng := rand.New(rand.NewPCG(7, 7))
	d := make([]time.Duration, o.n)
	for i := range d {
		d[i] = o.min + time.Duration(rng.Int64N(int64(o.max-o.min)+1))
	}
	return d
}

func (o opts) body(i int) []byte {
	b := make([]byte, o.size)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

func index(body []byte) int {
	if len(body) < 8 {
		return -1
	}
	return int(binary.BigEndian.Uint64(body))
}

// wait waits for every published message or the timeout.
func (t *tracker) wait(o opts, published int64) result {
	if published == int64(o.n) {
		select {
		case <-t.done:
		case <-time.After(o.max + o.timeout):
		}
	} else {
		time.Sleep(o.max + 5*time.Second)
	}
	return t.finish(published)
}

const nsqInFlight = 200

func runNSQ(o opts) (result, error) {
	const topic, channel = "delay_bench", "ch"
	for _, u := range []string{"/topic/create?topic=" + topic, "/channel/create?topic=" + topic + "&channel=" + channel} {
		resp, err := http.Post("http://"+o.http+u, "text/plain", nil)
		if err != nil {
			return result{}, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return result{}, fmt.Errorf("nsqd %s: %s", u, resp.Status)
		}
	}
	// nsqd's queue scan workers pick up a new channel only at their refresh
	// (QueueScanRefreshInterval, 5 s): wait for it, so that no message
	// waits for it.
	time.Sleep(5500 * time.Millisecond)
	t := newTracker("nsqd", o.n)
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = 2500
	c, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		return result{}, err
	}
	c.SetLogger(nil, nsq.LogLevelError)
	c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		t.receive(index(m.Body), time.Now())
		return nil
	}))
	if err := c.ConnectToNSQD(o.addr); err != nil {
		return result{}, err
	}
	defer c.Stop()
	p, err := nsq.NewProducer(o.addr, nsq.NewConfig())
	if err != nil {
		return result{}, err
	}
	p.SetLogger(nil, nsq.LogLevelError)
	defer p.Stop()
	delays := o.delays()
	acks := make(chan *nsq.ProducerTransaction, 10000)
	var published, failed atomic.Int64
	acked := make(chan struct{})
	// At most nsqInFlight DPUBs unanswered: the ack then follows nsqd's
	// receipt (its due-time base) by the time nsqd takes for that many,
	// a few milliseconds, not the whole publishing pipeline.
	inflight := make(chan struct{}, nsqInFlight)
	go func() {
		defer close(acked)
		for n := 0; n < o.n; n++ {
			tr := <-acks
			<-inflight
			i := tr.Args[0].(int)
			if tr.Error != nil {
				failed.Add(1)
				continue
			}
			t.mu.Lock()
			t.due[i] = time.Now().Add(delays[i]).UnixNano()
			t.mu.Unlock()
			published.Add(1)
		}
	}()
	start := time.Now()
	for i := range o.n {
		inflight <- struct{}{}
		t.mu.Lock()
		t.earliest[i] = time.Now().Add(delays[i]).UnixNano()
		t.due[i] = t.earliest[i]
		t.mu.Unlock()
		if err := p.DeferredPublishAsync(topic, delays[i], o.body(i), acks, i); err != nil {
			return result{}, err
		}
	}
	<-acked
	pubS := time.Since(start).Seconds()
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(os.Stderr, "delaypeer: %d DPUBs failed\n", f)
	}
	r := t.wait(o, published.Load())
	r.PublishS = pubS
	return r, nil
}

func runNATS(o opts) (result, error) {
	nc, err := nats.Connect("nats://" + o.addr)
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		return result{}, err
	}
	ctx := context.Background()
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "DELAY", Subjects: []string{"sched.>", "due"},
		Storage: jetstream.FileStorage, AllowMsgSchedules: true})
	if err != nil {
		return result{}, err
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench", FilterSubject: "due",
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return result{}, err
	}
	t := newTracker("nats", o.n)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		t.receive(index(m.Data()), time.Now())
		m.Ack()
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		return result{}, err
	}
	defer cc.Stop()
	delays := o.delays()
	var published, failed atomic.Int64
	start := time.Now()
	futures := make(chan jetstream.PubAckFuture, 10000)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		for f := range futures {
			select {
			case <-f.Ok():
				published.Add(1)
			case err := <-f.Err():
				if failed.Add(1) <= 3 {
					fmt.Fprintln(os.Stderr, "delaypeer: schedule refused:", err)
				}
			}
		}
	}()
	for i := range o.n {
		due := time.Now().Add(delays[i]).Truncate(time.Millisecond)
		t.mu.Lock()
		t.earliest[i], t.due[i] = due.UnixNano(), due.UnixNano()
		t.mu.Unlock()
		m := nats.NewMsg(fmt.Sprintf("sched.%d", i))
		m.Data = o.body(i)
		m.Header.Set("Nats-Schedule", "@at "+due.UTC().Format(time.RFC3339Nano))
		m.Header.Set("Nats-Schedule-Target", "due")
		// A full async window waits for acks (up to a minute) rather than
		// failing: under load the server acks slowly, and that is its figure.
		f, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return result{}, err
		}
		futures <- f
	}
	close(futures)
	<-acked
	pubS := time.Since(start).Seconds()
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(os.Stderr, "delaypeer: %d schedules failed\n", f)
	}
	r := t.wait(o, published.Load())
	r.PublishS = pubS
	return r, nil
}
