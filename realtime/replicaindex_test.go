package realtime_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
)

// A slave copies its master's message-index runs byte for byte
// (CmdSyncIndexRun) rather than building its own, finds the messages by
// id on them, and reopened as a master (indexing only the log past its
// last copied run) finds every message.
func TestReplication_SlaveCopiesIndexRuns(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := startBroker(t, mdir, replOptions)
	s := startSlave(t, sdir, m.addr())
	tc := newClient(t)
	p := newProducer(t, m.addr())
	const n = 3000 // 2 KB each: several 2 MiB segments, so several runs
	body := bytes.Repeat([]byte("x"), 2000)
	for i := range n {
		if err := p.Send(context.Background(), &producer.Message{Subject: "runs", ID: fmt.Sprintf("c-%d", i), Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, m, 20*time.Second)
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		runs, err := filepath.Glob(filepath.Join(mdir, "index", "*.run"))
		if err != nil || len(runs) < 2 {
			return fmt.Errorf("the master has %d runs (%v)", len(runs), err)
		}
		for _, r := range runs {
			a, err := os.ReadFile(r)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(filepath.Join(sdir, "index", filepath.Base(r)))
			if err != nil || !bytes.Equal(a, b) {
				return fmt.Errorf("run %s not copied (%v)", filepath.Base(r), err)
			}
		}
		return nil
	})
	find := func(addr string, i int) error {
		body, err := tc.Call(context.Background(), addr, protocol.CmdFindMessages,
			protocol.AppendFindMessagesRequest(nil, &protocol.FindMessagesRequest{By: protocol.FindByID, Value: fmt.Sprintf("c-%d", i)}))
		if err != nil {
			return err
		}
		r, err := protocol.DecodeFindMessagesResponse(body)
		if err != nil {
			return err
		}
		if len(r.Messages) != 1 {
			return fmt.Errorf("c-%d found %d times", i, len(r.Messages))
		}
		return nil
	}
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, i := range []int{0, n / 2, n - 1} {
			if err := find(s.addr(), i); err != nil {
				return fmt.Errorf("slave: %w", err)
			}
		}
		return nil
	})
	for _, b := range []*testBroker{s, m} {
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	promoted := startBroker(t, sdir, replOptions)
	for i := range n {
		if err := find(promoted.addr(), i); err != nil {
			t.Fatalf("promoted slave: %v", err)
		}
	}
}
