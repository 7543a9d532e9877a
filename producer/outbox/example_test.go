package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/producer/outbox"
	"github.com/qmq-go/qmq/realtime"
)

// startExampleBroker runs a broker on a free loopback port with its data in
// a temporary directory, as a test would.
func startExampleBroker(dir string) (addr string, stop func()) {
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = "127.0.0.1:0", "", dir, 8<<20
	b, err := realtime.New(o, nil)
	if err != nil {
		panic(err)
	}
	if err := b.Start(); err != nil {
		panic(err)
	}
	return b.Addr().String(), func() { b.Close(context.Background()) }
}

func ExampleOutbox_Transact() {
	dir, _ := os.MkdirTemp("", "outbox-example-")
	defer os.RemoveAll(dir)
	addr, stop := startExampleBroker(filepath.Join(dir, "broker"))
	defer stop()
	ctx := context.Background()

	// The application's database: here SQLite, as doc.go recommends opening it.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT NOT NULL)"); err != nil {
		panic(err)
	}
	if err := outbox.CreateSchema(ctx, db, outbox.SQLite); err != nil {
		panic(err)
	}

	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	ob, err := outbox.New(db, outbox.SQLite, p)
	if err != nil {
		panic(err)
	}
	defer ob.Close(ctx) // before p.Close: waits for the messages handed over

	// The order row and its message commit together, or neither does.
	err = ob.Transact(ctx, nil, func(tx *outbox.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, state) VALUES (?, 'paid')", "42"); err != nil {
			return err
		}
		return tx.Send(ctx, &producer.Message{Subject: "order.paid", Body: []byte("order 42 paid")})
	})
	if err != nil {
		panic(err)
	}

	c, _ := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("billing-1"))
	defer c.Close(ctx)
	got := make(chan string, 1)
	c.Subscribe("order.paid", "billing", func(ctx context.Context, m *consumer.Message) error {
		got <- string(m.Body)
		return nil
	}, consumer.StartEarliest())
	select {
	case body := <-got:
		fmt.Println(body)
	case <-time.After(10 * time.Second):
		fmt.Println("not delivered")
	}
	// Output: order 42 paid
}
