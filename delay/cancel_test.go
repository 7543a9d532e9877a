package delay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
)

// Cancel through the producer against a master with --wait-slave and its
// slave: each answer (cancelled, already fired, not found, key exists),
// and then the master goes away right after the cancels were answered and
// its slave's copy opens as the master: no cancelled message is delivered,
// every other one is.
func TestCancel_AnswersAndFailover(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "timers")
	mo := delay.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.DataDir, mo.Realtime = testutil.ReusableAddr(t), "", t.TempDir(), []string{rtAddr}
	mo.WaitSlave = true
	m := startDelayWith(t, mo)
	slaveDir := t.TempDir()
	sl := startDelayWith(t, slaveOptions(t, slaveDir, mo.Addr, rtAddr))
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(mo.Addr))),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()

	soon := &producer.Message{Subject: "timers", Body: []byte("soon"), DeliverAt: time.Now().Add(700 * time.Millisecond)}
	producer.SetScheduleKey(soon, "soon")
	if err := p.Send(ctx, soon); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(4 * time.Second)
	var ids []string
	for i := range 20 {
		msg := &producer.Message{Subject: "timers", Body: fmt.Appendf(nil, "%d", i), DeliverAt: due}
		producer.SetScheduleKey(msg, fmt.Sprint("order-", i))
		if err := p.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msg.ID)
	}
	again := &producer.Message{Subject: "timers", Body: []byte("again"), DeliverAt: due}
	producer.SetScheduleKey(again, "order-3")
	if err := p.Send(ctx, again); !errors.Is(err, producer.ErrKeyExists) {
		t.Fatalf("second message with a pending key: %v, want ErrKeyExists", err)
	}
	cancelled := map[string]bool{}
	for i := 0; i < 20; i += 2 {
		var err error
		if i%4 == 0 {
			err = p.Cancel(ctx, "timers", fmt.Sprint("order-", i))
		} else {
			err = p.CancelID(ctx, "timers", ids[i])
		}
		if err != nil {
			t.Fatalf("cancel %d: %v", i, err)
		}
		cancelled[ids[i]] = true
	}
	if err := p.Cancel(ctx, "timers", "order-0"); err != nil {
		t.Fatalf("cancel again: %v, want cancelled again", err)
	}
	later := due.Add(1500 * time.Millisecond)
	if err := p.Reschedule(ctx, "timers", "order-1", later); err != nil {
		t.Fatalf("reschedule: %v", err)
	}
	if err := p.RescheduleID(ctx, "timers", ids[3], later); err != nil {
		t.Fatalf("reschedule by id: %v", err)
	}
	if err := p.Reschedule(ctx, "timers", "order-5", time.Now().Add(-time.Second)); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("reschedule into the past: %v, want ErrInvalid", err)
	}
	if err := p.Reschedule(ctx, "timers", "order-0", later); !errors.Is(err, producer.ErrNotFound) {
		t.Fatalf("reschedule of a cancelled message: %v, want ErrNotFound", err)
	}
	if err := p.Cancel(ctx, "timers", "no-such-key"); !errors.Is(err, producer.ErrNotFound) {
		t.Fatalf("cancel of an unknown key: %v, want ErrNotFound", err)
	}
	if err := p.Cancel(ctx, "timers", ""); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("cancel with an empty key: %v, want ErrInvalid", err)
	}
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got[soon.ID]) == 0 {
			return errors.New("the message due soon is not delivered yet")
		}
		return nil
	})
	if err := p.Cancel(ctx, "timers", "soon"); !errors.Is(err, producer.ErrAlreadyFired) {
		t.Fatalf("cancel after delivery: %v, want ErrAlreadyFired", err)
	}

	// The slave acknowledged the cancels before they were answered: stop
	// it first (it copies nothing more), then the master, and open the
	// slave's copy as the master.
	if err := sl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	po := delay.NewOptions()
	po.Addr, po.HTTPAddr, po.DataDir, po.Realtime = mo.Addr, "", slaveDir, []string{rtAddr}
	promoted := startDelayWith(t, po)
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if !cancelled[id] && len(got[id]) == 0 {
				return fmt.Errorf("message %s not delivered", id)
			}
		}
		return nil
	})
	if err := p.Cancel(ctx, "timers", "order-1"); !errors.Is(err, producer.ErrAlreadyFired) {
		t.Fatalf("cancel of a delivered message on the promoted master: %v, want ErrAlreadyFired", err)
	}
	if err := p.Cancel(ctx, "timers", "order-0"); err != nil {
		t.Fatalf("cancel again on the promoted master: %v, want cancelled", err)
	}
	time.Sleep(300 * time.Millisecond) // anything cancelled would have come by now too
	mu.Lock()
	defer mu.Unlock()
	for id := range cancelled {
		if len(got[id]) != 0 {
			t.Fatalf("cancelled message %s delivered", id)
		}
	}
	for _, id := range []string{ids[1], ids[3]} {
		if r := got[id]; len(r) != 1 || r[0].at.Before(later) || r[0].deliverAt.Sub(later).Abs() > time.Millisecond {
			t.Fatalf("rescheduled message %s: receipts %+v, want one at or after %v", id, r, later)
		}
	}
	if st := promoted.Stats(); st.Pending != 0 {
		t.Fatalf("promoted master still holds %d pending", st.Pending)
	}
}

// A delayed message whose expiry passes before it falls due is dropped by
// the delay server and counted; one due before its expiry is delivered.
func TestExpiry_DelayServerDropsExpired(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "expiring")
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Realtime = "127.0.0.1:0", testutil.ReusableAddr(t), t.TempDir(), []string{rtAddr}
	dl := startDelayWith(t, o)
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(dl.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	now := time.Now()
	dead := &producer.Message{Subject: "expiring", Body: []byte("dead"), DeliverAt: now.Add(800 * time.Millisecond)}
	producer.SetExpiry(dead, now.Add(300*time.Millisecond))
	alive := &producer.Message{Subject: "expiring", Body: []byte("alive"), DeliverAt: now.Add(800 * time.Millisecond)}
	producer.SetExpiry(alive, now.Add(time.Hour))
	for _, m := range []*producer.Message{dead, alive} {
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		n, err := gaugeAt(o.HTTPAddr, "qmq_delay_messages_expired_total")
		if err != nil || n != 1 {
			return fmt.Errorf("expired counter %v (%v), want 1", n, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got[alive.ID]) != 1 {
			return errors.New("the message within its expiry is not delivered")
		}
		return nil
	})
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := dl.Stats().Pending; n != 0 {
			return fmt.Errorf("pending %d: the expired message is not marked done", n)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got[dead.ID]) != 0 {
		t.Fatal("the expired message was delivered")
	}
}

// The timeline on the HTTP port: counts per minute and pages of pending
// messages, with clear errors for bad input.
func TestSchedule_TimelineOverHTTP(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Realtime = "127.0.0.1:0", testutil.ReusableAddr(t), t.TempDir(), []string{rtAddr}
	dl := startDelayWith(t, o)
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(dl.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	base := time.Now().Add(2 * time.Hour).Truncate(time.Hour)
	for i := range 25 {
		m := &producer.Message{Subject: "plans", Body: []byte("x"), Tags: []string{"t"}, DeliverAt: base.Add(time.Duration(i) * 30 * time.Second)}
		producer.SetScheduleKey(m, fmt.Sprint("plan-", i))
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get("http://" + o.HTTPAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	q := "subject=plans&from=" + url.QueryEscape(base.Format(time.RFC3339)) + "&to=" + url.QueryEscape(base.Add(time.Hour).Format(time.RFC3339))
	var tl struct {
		Buckets []struct {
			Start time.Time
			Count int64
		}
	}
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if code := get("/schedule/timeline?"+q+"&step=1m", &tl); code != http.StatusOK {
			return fmt.Errorf("timeline: HTTP %d", code)
		}
		n := int64(0)
		for _, b := range tl.Buckets {
			n += b.Count
		}
		if len(tl.Buckets) != 13 || n != 25 || tl.Buckets[0].Count != 2 || !tl.Buckets[0].Start.Equal(base) {
			return fmt.Errorf("timeline %+v", tl.Buckets)
		}
		return nil
	})
	var ids []string
	cursor := ""
	for {
		var page struct {
			Messages []struct {
				ID, Key string
				Due     time.Time
				Tags    []string
			}
			Next string
		}
		if code := get("/schedule/pending?"+q+"&limit=10&cursor="+cursor, &page); code != http.StatusOK {
			t.Fatalf("pending: HTTP %d", code)
		}
		for _, m := range page.Messages {
			if !strings.HasPrefix(m.Key, "plan-") || len(m.Tags) != 1 {
				t.Fatalf("listed %+v", m)
			}
			ids = append(ids, m.ID)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if len(ids) != 25 {
		t.Fatalf("pages listed %d messages, want 25", len(ids))
	}

	// qmqctl schedule: the same through the command line, and cancel.
	ctlRun := func(args ...string) (int, string) {
		var out, errOut strings.Builder
		code := ctl.Main(append([]string{"--timeout", "10s"}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	win := []string{"--subject", "plans", "--from", base.Format(time.RFC3339), "--to", base.Add(time.Hour).Format(time.RFC3339)}
	if code, out := ctlRun(append([]string{"schedule", "timeline", "--delay-http", o.HTTPAddr}, win...)...); code != 0 || !regexp.MustCompile(`total\s+25`).MatchString(out) {
		t.Fatalf("qmqctl schedule timeline: exit %d\n%s", code, out)
	}
	if code, out := ctlRun(append([]string{"schedule", "list", "--delay-http", o.HTTPAddr, "--limit", "10"}, win...)...); code != 0 || !strings.Contains(out, "plan-0") || !strings.Contains(out, "next page: --cursor") {
		t.Fatalf("qmqctl schedule list: exit %d\n%s", code, out)
	}
	dlAddr := dl.Addr().String()
	if code, out := ctlRun("schedule", "cancel", "--delay", dlAddr, "--subject", "plans", "--key", "plan-3"); code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("qmqctl schedule cancel: exit %d\n%s", code, out)
	}
	if code, out := ctlRun("schedule", "cancel", "--delay", dlAddr, "--subject", "plans", "--key", "no-such"); code != ctl.ExitNotFound {
		t.Fatalf("qmqctl schedule cancel of an unknown key: exit %d, want %d\n%s", code, ctl.ExitNotFound, out)
	}
	if code, out := ctlRun("schedule", "reschedule", "--delay", dlAddr, "--subject", "plans", "--key", "plan-4", "--at", base.Add(-3*time.Hour).Format(time.RFC3339)); code != ctl.ExitUsage || !strings.Contains(out, "not after now") {
		t.Fatalf("qmqctl schedule reschedule into the past: exit %d, want %d\n%s", code, ctl.ExitUsage, out)
	}
	if code, out := ctlRun("schedule", "reschedule", "--delay", dlAddr, "--subject", "plans", "--key", "plan-4", "--at", base.Add(90*time.Minute).Format(time.RFC3339)); code != 0 {
		t.Fatalf("qmqctl schedule reschedule: exit %d\n%s", code, out)
	}
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if code, out := ctlRun(append([]string{"schedule", "timeline", "--delay-http", o.HTTPAddr}, win...)...); code != 0 || !regexp.MustCompile(`total\s+23`).MatchString(out) {
			return fmt.Errorf("after a cancel and a reschedule out of the window: exit %d\n%s", code, out)
		}
		return nil
	})

	for _, bad := range []string{"/schedule/timeline?" + q + "&step=7m", "/schedule/timeline?from=yesterday", "/schedule/pending?" + q + "&cursor=x",
		"/schedule/pending?" + q + "&limit=0", "/schedule/pending?from=" + url.QueryEscape(base.Format(time.RFC3339))} {
		if code := get(bad, nil); code != http.StatusBadRequest {
			t.Fatalf("%s: HTTP %d, want 400", bad, code)
		}
	}
}

// A recurring schedule every second: its occurrences arrive, each a
// message of its own, never before its time, none twice; deleting it stops
// them; a bad expression is refused.
func TestRecurring_EverySecond(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "ticks")
	dl := startDelay(t, t.TempDir(), "127.0.0.1:0", rtAddr)
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(dl.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	if err := p.CreateSchedule(ctx, producer.Schedule{Name: "tick", Subject: "ticks", Body: []byte("tick"), Cron: "@every 1s"}); err != nil {
		t.Fatal(err)
	}
	if err := p.CreateSchedule(ctx, producer.Schedule{Name: "tick", Subject: "ticks", Body: []byte("tick"), Cron: "@every 1s"}); !errors.Is(err, producer.ErrKeyExists) {
		t.Fatalf("a second schedule of the same name: %v, want ErrKeyExists", err)
	}
	if err := p.CreateSchedule(ctx, producer.Schedule{Name: "bad", Subject: "ticks", Cron: "61 * * * *"}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("bad cron: %v, want ErrInvalid", err)
	}
	// A template sent by hand with a bad expression is refused by the server.
	bad := &producer.Message{Subject: "ticks", Body: []byte("x"), DeliverAt: time.Now().Add(time.Hour),
		Properties: []producer.Property{{Key: protocol.PropCronSpec, Value: "every so often"}}}
	producer.SetScheduleKey(bad, "bad")
	if err := p.Send(ctx, bad); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("bad template sent by hand: %v, want ErrInvalid", err)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := count(); n < 3 {
			return fmt.Errorf("%d occurrences so far", n)
		}
		return nil
	})
	if err := p.DeleteSchedule(ctx, "ticks", "tick"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // an occurrence in flight at the delete may still land
	n := count()
	time.Sleep(2500 * time.Millisecond)
	if count() != n {
		t.Fatalf("occurrences went on after the delete: %d then %d", n, count())
	}
	if err := p.DeleteSchedule(ctx, "ticks", "tick"); err != nil {
		t.Fatalf("second delete: %v, want nil (a cancel is answered cancelled again)", err)
	}
	if err := p.DeleteSchedule(ctx, "ticks", "never-was"); !errors.Is(err, producer.ErrNotFound) {
		t.Fatalf("delete of an unknown schedule: %v, want ErrNotFound", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, rs := range got {
		if len(rs) != 1 {
			t.Fatalf("occurrence %s delivered %d times", id, len(rs))
		}
		if rs[0].at.Before(rs[0].deliverAt) {
			t.Fatalf("occurrence %s delivered %v early", id, rs[0].deliverAt.Sub(rs[0].at))
		}
	}
}
