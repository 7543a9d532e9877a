package delay

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

func template(t *testing.T, spec, zone, missed string, due time.Time) []byte {
	t.Helper()
	m := &protocol.Message{Subject: "jobs", ID: "tmpl", Body: []byte("run"), Tags: []string{"cron"}, DeliverAt: due,
		Properties: []protocol.Property{{Key: protocol.PropScheduleKey, Value: "nightly"}, {Key: protocol.PropCronSpec, Value: spec}, {Key: "own", Value: "x"}}}
	if zone != "" {
		m.Properties = append(m.Properties, protocol.Property{Key: protocol.PropCronZone, Value: zone})
	}
	if missed != "" {
		m.Properties = append(m.Properties, protocol.Property{Key: protocol.PropCronMissed, Value: missed})
	}
	b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nextOf(t *testing.T, tmpl []byte, due, now time.Time) (occ *protocol.Message, next time.Time) {
	t.Helper()
	r, err := recur(tmpl, due.UnixMilli(), now.UnixMilli(), protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if r.occurrence != nil {
		if occ, err = protocol.DecodeMessage(r.occurrence); err != nil {
			t.Fatal(err)
		}
	}
	if r.next != nil {
		m, err := protocol.DecodeMessage(r.next)
		if err != nil {
			t.Fatal(err)
		}
		next = m.DeliverAt
	}
	return occ, next
}

// Occurrences follow the expression in its zone across DST changes (a
// local time that does not exist is skipped that day, one that happens
// twice fires once) and leap days.
func TestRecur_DSTAndLeapDay(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	// Spring forward: 2030-03-10 02:00 → 03:00 in New York; 02:30 does not
	// exist that day.
	due := time.Date(2030, 3, 9, 2, 30, 0, 0, ny)
	tmpl := template(t, "30 2 * * *", "America/New_York", "", due)
	occ, next := nextOf(t, tmpl, due, due)
	if want := time.Date(2030, 3, 11, 2, 30, 0, 0, ny); !next.Equal(want) {
		t.Fatalf("after %v next is %v, want %v (02:30 does not exist on the 10th)", due, next.In(ny), want)
	}
	if occ == nil || occ.ID != "tmpl."+strconv.FormatInt(due.UnixMilli(), 10) || !occ.DeliverAt.Equal(due) {
		t.Fatalf("occurrence %+v", occ)
	}
	if v, _ := occ.Property(protocol.PropCronOccurrence); v != strconv.FormatInt(due.UnixMilli(), 10) {
		t.Fatalf("occurrence property %q", v)
	}
	if _, ok := occ.Property(protocol.PropCronSpec); ok {
		t.Fatal("the occurrence carries the cron expression: it would recur itself")
	}
	if _, ok := occ.Property(protocol.PropScheduleKey); ok {
		t.Fatal("the occurrence carries the schedule key")
	}
	if v, _ := occ.Property("own"); v != "x" || len(occ.Tags) != 1 {
		t.Fatalf("the occurrence lost the template's own properties or tags: %+v", occ)
	}
	// Fall back: 2030-11-03 01:00–02:00 happens twice; 01:30 fires once.
	due = time.Date(2030, 11, 2, 1, 30, 0, 0, ny)
	tmpl = template(t, "30 1 * * *", "America/New_York", "", due)
	_, next = nextOf(t, tmpl, due, due)
	_, after := nextOf(t, template(t, "30 1 * * *", "America/New_York", "", next), next, next)
	if next.In(ny).Day() != 3 || after.In(ny).Day() != 4 || after.Sub(next) != 25*time.Hour {
		t.Fatalf("fall back: %v then %v", next.In(ny), after.In(ny))
	}
	// Leap day: Feb 29 noon UTC comes every four years.
	due = time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC)
	_, next = nextOf(t, template(t, "0 12 29 2 *", "", "", due), due, due)
	if want := time.Date(2032, 2, 29, 12, 0, 0, 0, time.UTC); !next.Equal(want) {
		t.Fatalf("leap day: next %v, want %v", next, want)
	}
}

// Missed occurrences: "once" sends one late and goes on from now; "skip"
// sends none.
func TestRecur_Missed(t *testing.T) {
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := due.Add(10*time.Minute + 30*time.Second)
	occ, next := nextOf(t, template(t, "@every 1m", "", "", due), due, now)
	if occ == nil || !occ.DeliverAt.Equal(due) || !next.After(now) || next.Sub(now) > time.Minute {
		t.Fatalf("once: occurrence %v, next %v", occ, next)
	}
	occ, next = nextOf(t, template(t, "@every 1m", "", "skip", due), due, now)
	if occ != nil || !next.After(now) {
		t.Fatalf("skip: occurrence %v, next %v", occ, next)
	}
	// On time: the next one follows the due time, not now.
	occ, next = nextOf(t, template(t, "@every 1m", "", "skip", due), due, due.Add(3*time.Millisecond))
	if occ == nil || !next.Equal(due.Add(time.Minute)) {
		t.Fatalf("on time: occurrence %v, next %v", occ, next)
	}
}

func TestParseCron_BadInput(t *testing.T) {
	for _, c := range []struct{ spec, zone, missed string }{
		{"61 * * * *", "", ""}, {"not cron", "", ""}, {"* * * * *", "Mars/Olympus", ""}, {"* * * * *", "", "twice"},
		{"CRON_TZ=UTC * * * * *", "", ""},
	} {
		b := template(t, c.spec, c.zone, c.missed, time.Now())
		v, _ := protocol.ParseMessage(b)
		if _, ok, err := ParseCron(&v); !ok || !errors.Is(err, protocol.ErrInvalid) {
			t.Fatalf("%+v: ok %v err %v, want ErrInvalid", c, ok, err)
		}
	}
	b, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "jobs", ID: "x", Properties: []protocol.Property{{Key: protocol.PropCronSpec, Value: "@hourly"}}}, protocol.DefaultLimits)
	v, _ := protocol.ParseMessage(b)
	if _, _, err := ParseCron(&v); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("a template without a name: %v", err)
	}
}

// An occurrence built ahead is the one built when its template fires (same
// bytes), taken once, and never for another template under the same id.
func TestOccurrences_BuiltAhead(t *testing.T) {
	now := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	due := now.Add(2 * time.Second)
	tmpl := template(t, "@every 1s", "", "", due)
	built := newOccurrences()
	built.build(tmpl, now, protocol.DefaultLimits)
	want, err := recur(tmpl, due.UnixMilli(), due.UnixMilli(), protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	got, err := recurFrom(tmpl, due.UnixMilli(), due.UnixMilli(), protocol.DefaultLimits, built)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.occurrence) != string(want.occurrence) || string(got.next) != string(want.next) {
		t.Fatal("the occurrence built ahead differs from the one built when the template fires")
	}
	if v, _ := protocol.ParseMessage(tmpl); built.take(&v, due.UnixMilli()) != nil {
		t.Fatal("an occurrence built ahead was taken twice")
	}
	// Another template under the same id (replaced): not taken.
	built.build(tmpl, now, protocol.DefaultLimits)
	other := template(t, "@every 2s", "", "", due)
	if v, _ := protocol.ParseMessage(other); built.take(&v, due.UnixMilli()) != nil {
		t.Fatal("the occurrence of another template under the same id was taken")
	}
	// Due beyond builtAhead: not built.
	late := template(t, "@every 1s", "", "", now.Add(builtAhead+time.Minute))
	built.build(late, now, protocol.DefaultLimits)
	if v, _ := protocol.ParseMessage(late); built.take(&v, now.Add(builtAhead+time.Minute).UnixMilli()) != nil {
		t.Fatal("an occurrence due beyond builtAhead was built")
	}
}

// The occurrence of the next time patched from the last one is the one
// occurrenceOf builds, byte for byte; and buildNext's (patched) is the one
// build's.
func TestOccurrenceAt_SameBytes(t *testing.T) {
	due := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	tmpl := template(t, "@every 1s", "", "", due)
	v, _ := protocol.ParseMessage(tmpl)
	first, err := occurrenceOf(&v, due.UnixMilli(), protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	at := due.Add(1234 * time.Millisecond).UnixMilli()
	want, _ := occurrenceOf(&v, at, protocol.DefaultLimits)
	if got := occurrenceAt(first, due.UnixMilli(), at); string(got) != string(want) {
		t.Fatalf("patched occurrence differs:\n%x\n%x", got, want)
	}
	if _, err := protocol.ParseMessage(want); err != nil {
		t.Fatal(err)
	}
	if occurrenceAt(first, due.UnixMilli(), 99) != nil {
		t.Fatal("patched across a change of digits")
	}
	if occurrenceAt(first, due.UnixMilli()+1, at) != nil {
		t.Fatal("patched an occurrence of another time")
	}

	now := due.Add(-time.Second)
	cs, _, _ := ParseCron(&v)
	built := newOccurrences()
	built.build(tmpl, now, protocol.DefaultLimits)
	prev := built.take(&v, due.UnixMilli())
	if prev == nil || string(prev.msg) != string(first) || prev.id != "tmpl."+strconv.FormatInt(due.UnixMilli(), 10) || prev.subject != "jobs" ||
		!prev.afterOK || prev.after != due.Add(time.Second).UnixMilli() {
		t.Fatalf("built %+v", prev)
	}
	next := withDue(tmpl, at)
	built.buildNext(next, prev, &cs, now, protocol.DefaultLimits)
	nv, _ := protocol.ParseMessage(next)
	b := built.take(&nv, at)
	if b == nil || string(b.msg) != string(want) || b.id != "tmpl."+strconv.FormatInt(at, 10) || b.subject != "jobs" ||
		!b.afterOK || b.after != due.Add(2*time.Second).UnixMilli() { // "@every" runs on whole seconds
		t.Fatalf("built next %+v", b)
	}
}
