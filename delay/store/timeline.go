package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// The timeline: what is pending, counted per minute or listed a page at a
// time. Both read the hour files of the window as a stream (scanSchedule's
// 1 MiB chunks; no body is kept), skip what is dispatched, cancelled or
// already handed out, and never hold Store.mu while reading.

// MaxTimelineWindow bounds the window a Timeline or Pending call scans.
const MaxTimelineWindow = 31 * 24 * time.Hour

// TimelineBucket counts the pending messages of a subject due in one
// bucket [Start, Start+step).
type TimelineBucket struct {
	Start time.Time
	Count int64
	Bytes int64
}

// PendingMessage describes one pending message without its body.
type PendingMessage struct {
	ID   string
	Key  string // schedule key, "" when none
	Due  time.Time
	Size int // encoded size in bytes
	Tags []string
	// Cursor names the message's place for the next page.
	Cursor Cursor
}

// Cursor is a place in the timeline's listing order: hour files in
// ascending order, records in file order. The zero Cursor is the start.
type Cursor struct {
	Hour   int64 // hours since the Unix epoch
	Offset int64 // the next record at or after it is listed
}

// Timeline counts subject's pending messages due in [from, to) in buckets
// of step (a minute or more, dividing an hour, or whole hours), in
// ascending order; buckets with no message are left out. subject "" counts
// every subject.
func (s *Store) Timeline(subject string, from, to time.Time, step time.Duration) ([]TimelineBucket, error) {
	if err := checkWindow(from, to); err != nil {
		return nil, err
	}
	if step < time.Minute || step%time.Minute != 0 || (step < time.Hour && time.Hour%step != 0) || (step > time.Hour && step%time.Hour != 0) {
		return nil, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("timeline step %v: a whole number of minutes dividing an hour, or of hours", step))
	}
	counts := map[int64]*TimelineBucket{}
	stepMs := step.Milliseconds()
	err := s.scanPending(subject, from, to, Cursor{}, func(c Cursor, due int64, v *protocol.View) bool {
		b := due - mod(due, stepMs)
		tb := counts[b]
		if tb == nil {
			tb = &TimelineBucket{Start: time.UnixMilli(b).UTC()}
			counts[b] = tb
		}
		tb.Count++
		tb.Bytes += int64(len(v.Raw))
		return true
	})
	if err != nil {
		return nil, err
	}
	out := make([]TimelineBucket, 0, len(counts))
	for _, b := range counts {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// Pending lists up to limit of subject's pending messages due in [from,
// to), from the cursor on (hour files ascending, records in file order: not
// sorted by due time within an hour). next is the cursor of the following
// page; more is false when the window holds no more.
func (s *Store) Pending(subject string, from, to time.Time, after Cursor, limit int) (page []PendingMessage, next Cursor, more bool, err error) {
	if err := checkWindow(from, to); err != nil {
		return nil, Cursor{}, false, err
	}
	if subject == "" {
		return nil, Cursor{}, false, protocol.Errorf(protocol.StatusInvalid, "listing pending messages needs a subject")
	}
	if limit <= 0 || limit > 10000 {
		return nil, Cursor{}, false, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("page size %d: 1 to 10000", limit))
	}
	err = s.scanPending(subject, from, to, after, func(c Cursor, due int64, v *protocol.View) bool {
		if len(page) == limit {
			next, more = c, true
			return false
		}
		m := PendingMessage{ID: string(v.ID), Due: time.UnixMilli(due).UTC(), Size: len(v.Raw), Cursor: c}
		if k, ok := scheduleKey(v); ok {
			m.Key = string(k)
		}
		v.Tags(func(t []byte) bool { m.Tags = append(m.Tags, string(t)); return true })
		page = append(page, m)
		return true
	})
	return page, next, more, err
}

func checkWindow(from, to time.Time) error {
	switch {
	case !from.Before(to):
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("empty window [%s, %s)", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)))
	case to.Sub(from) > MaxTimelineWindow:
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("window of %v, longest %v", to.Sub(from), MaxTimelineWindow))
	}
	return nil
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// scanPending calls fn for each pending message of subject ("" any) due in
// [from, to), from cursor on, until fn returns false. A message is pending
// when it is neither dispatched (nor cancelled) in its hour's dispatch log,
// nor in the cancelled set, nor handed out already (due at or before the
// fire mark).
func (s *Store) scanPending(subject string, from, to time.Time, cursor Cursor, fn func(c Cursor, due int64, v *protocol.View) bool) error {
	fromMs, toMs := from.UnixMilli(), to.UnixMilli()
	type hourSnap struct {
		h, size   int64
		cancelled map[int64]cancelState
	}
	var hours []hourSnap
	s.mu.Lock()
	fireMark := s.fireMark
	for h, st := range s.hours {
		// An hour file holds messages due in its hour, and messages that
		// were already due when they were stored (due earlier): one that
		// ends before the window holds nothing due in it.
		if hourStart(h) >= toMs || hourStart(h+1) <= fromMs || h < cursor.Hour || st.size == 0 {
			continue
		}
		snap := hourSnap{h: h, size: st.size}
		if c := s.cancelled[h]; len(c) > 0 {
			snap.cancelled = make(map[int64]cancelState, len(c))
			for k, v := range c {
				snap.cancelled[k] = v
			}
		}
		hours = append(hours, snap)
	}
	s.mu.Unlock()
	sort.Slice(hours, func(i, j int) bool { return hours[i].h < hours[j].h })
	for _, hs := range hours {
		b, err := os.ReadFile(filepath.Join(s.dir, dispatchDir, hourName(hs.h)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		done, _ := parseDispatch(b)
		f, err := os.Open(filepath.Join(s.dir, scheduleDir, hourName(hs.h)))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed by retention meanwhile
		}
		if err != nil {
			return err
		}
		start := int64(0)
		if hs.h == cursor.Hour {
			start = cursor.Offset
		}
		stop := false
		scan := scanScheduleUntil(f, start, hs.size, maxRecordSize, func(off int64, msg []byte) bool {
			due := dueOf(msg)
			if due < fromMs || due >= toMs || due <= fireMark {
				return true
			}
			if i := sort.Search(len(done), func(i int) bool { return done[i] >= off }); i < len(done) && done[i] == off {
				return true
			}
			if _, ok := hs.cancelled[off]; ok {
				return true
			}
			v, err := protocol.ParseMessageNoCRC(msg)
			if err != nil || subject != "" && string(v.Subject) != subject {
				return true
			}
			stop = !fn(Cursor{Hour: hs.h, Offset: off}, due, &v)
			return !stop
		})
		f.Close()
		if stop {
			return nil
		}
		if scan.err != nil && !errors.Is(scan.err, errTorn) {
			return scan.err
		}
	}
	return nil
}
