package main

// The outbox suite: transactional messages (producer/outbox) on a
// PostgreSQL started for the run with fsync and synchronous_commit on,
// sending to qmq-realtime with its default durable flush (fsync before the
// ack). Clients run in worker processes, outboxClients transactions at a
// time, each transaction writing one business row and one 256-byte message.
//
//	outbox_plain_tx_per_s       BEGIN; INSERT the row; COMMIT; then a plain
//	                            producer.Send, which returns after the
//	                            broker's durable ack
//	outbox_tx_per_s             the same transaction with tx.Send writing the
//	                            message into the outbox table; Commit hands it
//	                            to the producer and returns. Timed until every
//	                            message is acknowledged and its row deleted.
//	outbox_send_vs_plain_ratio  outbox / plain (target ≥ 0.8), the median of
//	                            outboxRounds rounds of outboxRun per side
//	outbox_wait_tx_per_s        like-for-like: outbox.WithSyncSend, so Commit
//	                            also waits for the broker's durable ack, as
//	                            the plain client waits for Send
//	outbox_wait_vs_plain_ratio  outbox (waiting) / plain
//
// Then the crash part: application processes (8 clients, one transaction in
// five rolled back after its message was written) are SIGKILLed
// outboxKills times, at random moments 0.4–1.2 s into their run, a new one
// started after each kill; this process runs another instance's watchdog
// (delay outboxCrashDelay) and a consumer. The business table is the truth:
//
//	outbox_lost                     committed orders whose message never arrived (target 0)
//	outbox_rolled_back_sent         delivered messages of orders that did not commit (target 0)
//	outbox_watchdog_latency_p99_ms  from a kill to the delivery of each message
//	                                it left in the outbox (target ≤ delay + 1,000)
//	outbox_crash_duplicates         deliveries beyond the first

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/testdb"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/producer/outbox"
)

const (
	outboxClients    = 8
	outboxRun        = 3 * time.Second
	outboxRounds     = 7
	outboxKills      = 20
	outboxCrashDelay = 2 * time.Second
	outboxSubject    = "bench.outbox"
)

func init() {
	register("outbox", runOutbox)
	registerWorker("outbox-tx", outboxTxWorker)
	registerWorker("outbox-app", outboxAppWorker)
}

func runOutbox(env *Env) error {
	pg, err := testdb.StartPostgres(testdb.Options{Fsync: true})
	if err != nil {
		return err
	}
	defer pg.Stop()
	rt, addr, err := env.startRealtime(env.Dir + "/realtime")
	if err != nil {
		return err
	}
	defer rt.stop()
	dsn := pg.DSN("postgres")

	// Side by side in short rounds, the order rotating, so that a slow
	// spell of the shared machine hits every side alike; a ratio is the
	// median of the rounds' ratios, a rate the total over all rounds.
	modes := []string{"plain", "outbox", "wait"}
	var sum [3]rateResult
	var pgCPU, brokerCPU [3]time.Duration
	ratios := [2][]float64{}
	for round := range outboxRounds {
		var rates [3]float64
		for k := range modes {
			i := (round + k) % len(modes)
			mode := modes[i]
			var res rateResult
			pg0, rt0 := treeCPU(pg.PID()), processCPU(rt.cmd.Process.Pid)
			if err := runWorker("outbox-tx", &res, "-mode", mode, "-dsn", dsn, "-addr", addr,
				"-duration", outboxRun.String(), "-table", fmt.Sprintf("tx_%s_%d", mode, round)); err != nil {
				return err
			}
			pgCPU[i] += treeCPU(pg.PID()) - pg0
			brokerCPU[i] += processCPU(rt.cmd.Process.Pid) - rt0
			if res.Failed > 0 {
				return fmt.Errorf("%s: %d transactions failed", mode, res.Failed)
			}
			env.Logf("round %d %s: %d transactions in %v (%.0f/s)", round+1, mode, res.Messages, res.Elapsed.Round(time.Millisecond), res.rate())
			sum[i].Messages += res.Messages
			sum[i].Elapsed += res.Elapsed
			rates[i] = res.rate()
		}
		ratios[0] = append(ratios[0], rates[1]/rates[0])
		ratios[1] = append(ratios[1], rates[2]/rates[0])
	}
	env.Logf("outbox/plain by round: %.2f; waiting outbox/plain: %.2f", ratios[0], ratios[1])
	for i, mode := range modes {
		n := float64(sum[i].Messages)
		env.Logf("%s: CPU per transaction: PostgreSQL %.3f ms, broker %.3f ms", mode,
			float64(pgCPU[i].Microseconds())/n/1000, float64(brokerCPU[i].Microseconds())/n/1000)
	}
	env.Metric("outbox_plain_tx_per_s", sum[0].rate(), "tx/s")
	env.Metric("outbox_tx_per_s", sum[1].rate(), "tx/s")
	env.Metric("outbox_send_vs_plain_ratio", median(ratios[0]), "x")
	env.Metric("outbox_wait_tx_per_s", sum[2].rate(), "tx/s")
	env.Metric("outbox_wait_vs_plain_ratio", median(ratios[1]), "x")
	return env.outboxCrashes(dsn, addr)
}

// outboxTxWorker runs -clients transactions at a time for -duration:
//
//	plain   BEGIN; INSERT; COMMIT; producer.Send
//	outbox  outbox.Transact(INSERT; tx.Send)
//	wait    outbox with WithSyncSend: Commit waits for the broker
//
// The outbox modes count their time until the outbox is closed: every
// message acknowledged and its row deleted.
func outboxTxWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("outbox-tx", flag.ContinueOnError)
	mode := fs.String("mode", "plain", "plain, outbox or wait")
	dsn := fs.String("dsn", "", "PostgreSQL data source")
	addr := fs.String("addr", "", "broker address")
	d := fs.Duration("duration", outboxRun, "how long to run")
	clients := fs.Int("clients", outboxClients, "transactions at a time")
	table := fs.String("table", "tx", "prefix of the run's tables")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ctx := context.Background()
	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(*clients + 4)
	db.SetMaxIdleConns(*clients + 4)
	orders, outboxTable := *table+"_orders", *table+"_outbox"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+orders+" (id VARCHAR(64) PRIMARY KEY, state VARCHAR(16) NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		return nil, err
	}
	if err := outbox.CreateSchema(ctx, db, outbox.Postgres, outbox.WithTable(outboxTable)); err != nil {
		return nil, err
	}
	p, err := producer.New(producer.WithBrokers(*addr))
	if err != nil {
		return nil, err
	}
	defer p.Close(ctx)
	var ob *outbox.Outbox
	if *mode != "plain" {
		opts := []outbox.Option{outbox.WithTable(outboxTable)}
		if *mode == "wait" {
			opts = append(opts, outbox.WithSyncSend())
		}
		if ob, err = outbox.New(db, outbox.Postgres, p, opts...); err != nil {
			return nil, err
		}
	}
	insert := "INSERT INTO " + orders + " (id, state, amount) VALUES ($1, 'paid', $2)"
	body := make([]byte, messageSize)
	var done, failed, seq atomic.Int64
	one := func() error {
		id := fmt.Sprintf("o%d", seq.Add(1))
		msg := &producer.Message{Subject: outboxSubject, Body: body, Properties: []producer.Property{{Key: "order", Value: id}}}
		switch *mode {
		case "plain":
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insert, id, 42); err != nil {
				tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			return p.Send(ctx, msg)
		default:
			return ob.Transact(ctx, nil, func(tx *outbox.Tx) error {
				if _, err := tx.ExecContext(ctx, insert, id, 42); err != nil {
					return err
				}
				return tx.Send(ctx, msg)
			})
		}
	}
	start := time.Now()
	deadline := start.Add(*d)
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := one(); err != nil {
					failed.Add(1)
					fmt.Fprintln(os.Stderr, "transaction:", err)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if ob != nil {
		closeCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := ob.Close(closeCtx); err != nil {
			return nil, err
		}
		var left int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+outboxTable).Scan(&left); err != nil {
			return nil, err
		}
		if left != 0 {
			return nil, fmt.Errorf("%d outbox rows left after Close", left)
		}
	}
	return rateResult{Messages: done.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}, nil
}

// errDeclined rolls an application transaction back.
var errDeclined = errors.New("payment declined")

// outboxAppWorker is an application instance for the crash part: -clients
// goroutines commit orders (a business row and a message each) until the
// process is killed; one transaction in five is rolled back after its
// message was written. It runs a watchdog too, as every instance does.
func outboxAppWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("outbox-app", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "PostgreSQL data source")
	addr := fs.String("addr", "", "broker address")
	clients := fs.Int("clients", outboxClients, "transactions at a time")
	prefix := fs.String("prefix", "a", "order id prefix (unique per process)")
	delay := fs.Duration("delay", outboxCrashDelay, "outbox delay")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ctx := context.Background()
	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(*clients + 4)
	p, err := producer.New(producer.WithBrokers(*addr))
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(db, outbox.Postgres, p, outbox.WithTable("crash_outbox"), outbox.WithDelay(*delay))
	if err != nil {
		return nil, err
	}
	insert := "INSERT INTO crash_orders (id) VALUES ($1)"
	var seq atomic.Int64
	for c := range *clients {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c)))
			for {
				id := fmt.Sprintf("%s-%d", *prefix, seq.Add(1))
				err := ob.Transact(ctx, nil, func(tx *outbox.Tx) error {
					if _, err := tx.ExecContext(ctx, insert, id); err != nil {
						return err
					}
					msg := &producer.Message{Subject: outboxSubject + ".crash", Body: []byte(id),
						Properties: []producer.Property{{Key: "order", Value: id}}}
					if err := tx.Send(ctx, msg); err != nil {
						return err
					}
					if rng.IntN(5) == 0 {
						return errDeclined
					}
					return nil
				})
				if err != nil && !errors.Is(err, errDeclined) {
					fmt.Fprintln(os.Stderr, "transaction:", err)
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	select {} // until killed
}

// outboxCrashes runs the crash part (see the top of the file).
func (e *Env) outboxCrashes(dsn, addr string) error {
	ctx := context.Background()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE crash_orders (id VARCHAR(64) PRIMARY KEY)"); err != nil {
		return err
	}
	if err := outbox.CreateSchema(ctx, db, outbox.Postgres, outbox.WithTable("crash_outbox")); err != nil {
		return err
	}

	// Deliveries: by order, and the first time of each message id.
	var (
		mu      sync.Mutex
		orders  = map[string]int{}
		firstAt = map[string]time.Time{}
	)
	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("bench-outbox"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Subscribe(outboxSubject+".crash", "bench", func(_ context.Context, m *consumer.Message) error {
		now := time.Now()
		order, _ := m.Property("order")
		mu.Lock()
		orders[order]++
		if _, ok := firstAt[m.ID]; !ok {
			firstAt[m.ID] = now
		}
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.PullBatch(256), consumer.Concurrency(4)); err != nil {
		return err
	}

	// Another instance: its watchdog sends what the killed ones left.
	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	ob, err := outbox.New(db, outbox.Postgres, p, outbox.WithTable("crash_outbox"), outbox.WithDelay(outboxCrashDelay))
	if err != nil {
		return err
	}
	defer ob.Close(ctx)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	killedAt := map[string]time.Time{} // message id left in the outbox → kill time
	for k := range outboxKills {
		app, err := startProcess("outbox-app", self, "worker", "outbox-app", "-dsn", dsn, "-addr", addr,
			"-prefix", fmt.Sprintf("k%d", k), "-delay", outboxCrashDelay.String())
		if err != nil {
			return err
		}
		time.Sleep(400*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond))))
		app.kill()
		at := time.Now()
		if out := app.out.String(); len(out) > 0 {
			e.Logf("kill %d: the application said: %s", k+1, tail(out))
		}
		rows, err := db.QueryContext(ctx, "SELECT id FROM crash_outbox")
		if err != nil {
			return err
		}
		left := 0
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			mu.Lock()
			_, delivered := firstAt[id]
			mu.Unlock()
			if _, seen := killedAt[id]; !seen && !delivered {
				killedAt[id] = at
				left++
			}
		}
		rows.Close()
		e.Logf("kill %d: %d messages left in the outbox", k+1, left)
	}

	// Everything committed must arrive; give it the delay and a minute.
	committed := map[string]bool{}
	deadline := time.Now().Add(outboxCrashDelay + time.Minute)
	for {
		rows, err := db.QueryContext(ctx, "SELECT id FROM crash_orders")
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			committed[id] = true
		}
		rows.Close()
		var waiting int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM crash_outbox").Scan(&waiting); err != nil {
			return err
		}
		mu.Lock()
		missing := 0
		for id := range committed {
			if orders[id] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 && waiting == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // late duplicates, if any

	mu.Lock()
	defer mu.Unlock()
	lost, rolledBackSent, dups := 0, 0, 0
	for id := range committed {
		if orders[id] == 0 {
			lost++
		}
	}
	for id, n := range orders {
		if !committed[id] {
			rolledBackSent++
		}
		dups += n - 1
	}
	var micros []int64
	for id, at := range killedAt {
		if got, ok := firstAt[id]; ok {
			micros = append(micros, got.Sub(at).Microseconds())
		}
	}
	p50, p99, maxMs := percentilesMs(micros)
	e.Logf("crashes: %d kills, %d orders committed, %d delivered, %d messages left behind by kills (delivered after p50 %.0f ms, p99 %.0f ms, max %.0f ms; delay %v)",
		outboxKills, len(committed), len(orders), len(killedAt), p50, p99, maxMs, outboxCrashDelay)
	e.Metric("outbox_lost", float64(lost), "msgs")
	e.Metric("outbox_rolled_back_sent", float64(rolledBackSent), "msgs")
	e.Metric("outbox_watchdog_latency_p99_ms", p99, "ms")
	e.Metric("outbox_crash_duplicates", float64(dups), "msgs")
	if len(micros) == 0 {
		return fmt.Errorf("no kill left a message behind: the latency figure measures nothing")
	}
	return nil
}

// median returns the median of v (which it sorts).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// treeCPU is the CPU time of process pid, of its children that have ended
// (cutime and cstime) and of those still running (PostgreSQL's backends and
// helpers), from /proc.
func treeCPU(pid int) time.Duration {
	total := processCPU(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 14 {
				cu, _ := strconv.ParseInt(f[13], 10, 64)
				cs, _ := strconv.ParseInt(f[14], 10, 64)
				total += time.Duration(cu+cs) * 10 * time.Millisecond
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(c); err == nil {
				total += processCPU(child)
			}
		}
	}
	return total
}
