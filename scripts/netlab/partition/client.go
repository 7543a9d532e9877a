package partition

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
)

// The client runs in the lab's client host and tells the controller what
// happened, one line per event on stdout (times are Unix nanoseconds of
// the machine's clock, which every namespace shares):
//
//	A <kind> <id> <sent> <acked>    a routed send acknowledged; kind r
//	                                (realtime) or d (delayed)
//	F <kind> <sent> <failed>        a routed send failed
//	P <broker> <id> <sent> <acked>  a probe acknowledged by broker
//	R <id> <received> <early>       the consumer's handler got id; early 1
//	                                when before its deliver-at time
//
// It sends until its stdin closes, and consumes until it is killed.
const (
	clientSenders      = 4                      // routed realtime senders
	clientDelaySenders = 2                      // routed delayed senders
	clientDelayBy      = 2 * time.Second        // deliver-at of a delayed send
	clientProbeEvery   = 25 * time.Millisecond  // one probe per broker this often
	clientSendTimeout  = 5 * time.Second        // a routed send
	clientProbeTimeout = 1 * time.Second        // a probe
	clientConsumerID   = "partition-consumer-1" // stable across the run
	clientGroup        = "partition"            // consumer group
)

// ClientMain is the client program: args are -meta ADDR -subject S
// [-probe name=addr]... [-delay-probe name=addr]... . It returns when stdin
// closes and every sender stopped; the caller then lets it consume until it
// is killed (ClientMain's consumer keeps running in the background).
func ClientMain(args []string) error {
	fs := flag.NewFlagSet("partition-client", flag.ContinueOnError)
	meta := fs.String("meta", "", "meta server address")
	subject := fs.String("subject", "", "subject")
	var probes, delayProbes listFlag
	fs.Var(&probes, "probe", "name=addr of a realtime broker to probe directly")
	fs.Var(&delayProbes, "delay-probe", "name=addr of a delay broker to probe directly")
	withDelay := fs.Bool("delay", false, "also send delayed messages")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *meta == "" || *subject == "" {
		return errors.New("partition-client: -meta and -subject are required")
	}
	out := &eventWriter{w: bufio.NewWriterSize(os.Stdout, 64<<10)}
	go out.flushLoop()

	mc, err := metaclient.New([]string{*meta}, "partition-client", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID(clientConsumerID))
	if err != nil {
		return err
	}
	if _, err := c.Subscribe(*subject, clientGroup, func(ctx context.Context, m *consumer.Message) error {
		now := time.Now()
		early := 0
		if !m.DeliverAt.IsZero() && now.Before(m.DeliverAt) {
			early = 1
		}
		out.printf("R %s %d %d\n", m.ID, now.UnixNano(), early)
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		return err
	}
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(clientSendTimeout))
	if err != nil {
		return err
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	send := func(kind string, n int, delay time.Duration) {
		for g := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("%s%d-%d", kind, g, i)
					m := &producer.Message{Subject: *subject, ID: id, Body: []byte(id)}
					sent := time.Now()
					if delay > 0 {
						m.DeliverAt = sent.Add(delay)
					}
					ctx, cancel := context.WithTimeout(context.Background(), clientSendTimeout)
					err := p.Send(ctx, m)
					cancel()
					if err != nil {
						out.printf("F %s %d %d\n", kind, sent.UnixNano(), time.Now().UnixNano())
						time.Sleep(20 * time.Millisecond)
						continue
					}
					out.printf("A %s %s %d %d\n", kind, id, sent.UnixNano(), time.Now().UnixNano())
				}
			}()
		}
	}
	send("r", clientSenders, 0)
	if *withDelay {
		send("d", clientDelaySenders, clientDelayBy)
	}
	probe := func(name, addr string, delayed bool) error {
		groups := route.Groups(addr)
		r := route.NewStatic(groups, nil)
		if delayed {
			r = route.NewStatic(nil, groups)
		}
		pp, err := producer.New(producer.WithResolver(r), producer.WithSendTimeout(clientProbeTimeout),
			producer.WithTransportOptions(transport.Options{BreakerOpenTimeout: 100 * time.Millisecond}))
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pp.Close(context.Background())
			tick := time.NewTicker(clientProbeEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				id := fmt.Sprintf("p%s-%d", name, i)
				m := &producer.Message{Subject: *subject, ID: id, Body: []byte(id)}
				sent := time.Now()
				if delayed {
					m.DeliverAt = sent.Add(clientDelayBy)
				}
				ctx, cancel := context.WithTimeout(context.Background(), clientProbeTimeout)
				err := pp.Send(ctx, m)
				cancel()
				if err == nil {
					out.printf("P %s %s %d %d\n", name, id, sent.UnixNano(), time.Now().UnixNano())
				}
			}
		}()
		return nil
	}
	for _, pr := range probes {
		name, addr, _ := strings.Cut(pr, "=")
		if err := probe(name, addr, false); err != nil {
			return err
		}
	}
	for _, pr := range delayProbes {
		name, addr, _ := strings.Cut(pr, "=")
		if err := probe(name, addr, true); err != nil {
			return err
		}
	}
	io.Copy(io.Discard, os.Stdin) // until the controller closes it
	close(stop)
	wg.Wait()
	out.printf("S\n")
	out.flush()
	select {} // consume until killed
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// eventWriter serializes event lines and flushes them every few
// milliseconds.
type eventWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (e *eventWriter) printf(format string, args ...any) {
	e.mu.Lock()
	fmt.Fprintf(e.w, format, args...)
	e.mu.Unlock()
}

func (e *eventWriter) flush() {
	e.mu.Lock()
	e.w.Flush()
	e.mu.Unlock()
}

func (e *eventWriter) flushLoop() {
	for {
		time.Sleep(5 * time.Millisecond)
		e.flush()
	}
}
