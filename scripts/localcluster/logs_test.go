package localcluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/scripts/localcluster"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// lockedBuffer is a log sink safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Sync() error { return nil }

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// duplicateKeys returns the top-level keys that occur more than once in
// one JSON object.
func duplicateKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		if seen[key] {
			dups = append(dups, key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

// TestLogs_NoRepeatedKeys runs a cluster, a producer and a consumer whose
// handler fails once (a retry through the delay server) with JSON logs at
// debug level, then stops everything: no log line may carry a key twice (a
// server's logger names its group once; what it logs about consumer groups
// and other broker groups uses other keys).
func TestLogs_NoRepeatedKeys(t *testing.T) {
	var sink lockedBuffer
	enc := zap.NewProductionEncoderConfig()
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), &sink, zap.DebugLevel))
	c, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cons, err := consumer.New(consumer.WithMetaServers(c.MetaAddr()), consumer.WithConsumerID("c1"), consumer.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	if _, err := cons.Subscribe("orders", "billing", func(ctx context.Context, m *consumer.Message) error {
		if m.Attempts == 0 {
			return consumer.RetryAfter(600*time.Millisecond, errors.New("first try fails"))
		}
		once.Do(func() { close(done) })
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.WithMetaServers(c.MetaAddr()), producer.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Send(ctx, &producer.Message{Subject: "orders", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the retried message never came back")
	}
	_ = p.Close(ctx)
	_ = cons.Close(ctx)
	if err := c.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(sink.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines++
		dups, err := duplicateKeys(sc.Text())
		if err != nil {
			t.Fatalf("log line is no JSON object: %v: %s", err, sc.Text())
		}
		if len(dups) > 0 {
			t.Errorf("keys %v repeated in %s", dups, sc.Text())
		}
	}
	if lines < 5 {
		t.Fatalf("only %d log lines: the servers did not log", lines)
	}
}
