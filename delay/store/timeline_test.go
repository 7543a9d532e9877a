package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The timeline counts and lists pending messages only: not fired, not
// cancelled, not another subject's; pages follow one another without gaps
// or repeats.
func TestTimeline_CountsAndPages(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	// 300 messages: one every 20 s from epoch+10s (three a minute), over
	// two hours; every tenth cancelled; one of another subject per minute.
	var msgs [][]byte
	for i := 0; i < 300; i++ {
		msgs = append(msgs, encodeKeyed(t, fmt.Sprint("m", i), fmt.Sprint("k", i), epoch.Add(10*time.Second+time.Duration(i)*20*time.Second)))
	}
	for i := 0; i < 100; i++ {
		b, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "other", ID: fmt.Sprint("o", i), Body: []byte("x"), Created: epoch,
			DeliverAt: epoch.Add(time.Duration(i)*time.Minute + time.Second)}, protocol.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, b)
	}
	h.append(msgs...)
	var targets []protocol.ScheduleTarget
	for i := 0; i < 300; i += 10 {
		targets = append(targets, byKey(fmt.Sprint("k", i)))
	}
	for _, r := range h.store.CancelWait(targets) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	clk.Advance(3*time.Minute + 10*time.Second) // m0..m9 (and o0..o3) fire
	h.waitCount(9 + 4)

	from, to := epoch, epoch.Add(3*time.Hour)
	buckets, err := h.store.Timeline("orders", from, to, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, b := range buckets {
		total += b.Count
		if b.Start.Second() != 0 || b.Count > 3 || b.Count < 1 {
			t.Fatalf("bucket %+v", b)
		}
	}
	if want := int64(300 - 10 - 29); total != want { // fired m0..m9 (m0 was cancelled), 29 more cancelled
		t.Fatalf("timeline counts %d pending, want %d", total, want)
	}
	hours, err := h.store.Timeline("orders", from, to, time.Hour)
	if err != nil || len(hours) != 2 || hours[0].Count+hours[1].Count != total {
		t.Fatalf("hourly timeline %+v, %v", hours, err)
	}
	all, err := h.store.Timeline("", from, to, time.Hour)
	if err != nil || all[0].Count+all[1].Count != total+96 {
		t.Fatalf("timeline of every subject %+v, %v", all, err)
	}

	seen := map[string]bool{}
	var cur Cursor
	pages := 0
	for {
		page, next, more, err := h.store.Pending("orders", from, to, cur, 50)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, m := range page {
			if seen[m.ID] {
				t.Fatalf("%s listed twice", m.ID)
			}
			seen[m.ID] = true
			var i int
			fmt.Sscanf(m.ID, "m%d", &i)
			if i%10 == 0 || i < 10 || m.Key != fmt.Sprint("k", i) || !m.Due.Equal(epoch.Add(10*time.Second+time.Duration(i)*20*time.Second)) {
				t.Fatalf("listed %+v", m)
			}
		}
		if !more {
			break
		}
		cur = next
	}
	if int64(len(seen)) != total || pages != int(total+49)/50 {
		t.Fatalf("paging listed %d in %d pages, want %d", len(seen), pages, total)
	}

	for _, bad := range []struct {
		from, to time.Time
		step     time.Duration
	}{{to, from, time.Minute}, {from, from.Add(40 * 24 * time.Hour), time.Hour}, {from, to, 7 * time.Minute}, {from, to, time.Second}} {
		if _, err := h.store.Timeline("orders", bad.from, bad.to, bad.step); !errors.Is(err, protocol.ErrInvalid) {
			t.Fatalf("timeline %v..%v step %v: %v, want ErrInvalid", bad.from, bad.to, bad.step, err)
		}
	}
	if _, _, _, err := h.store.Pending("", from, to, Cursor{}, 10); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("listing without a subject: %v", err)
	}
}
