package delay

import (
	"encoding/binary"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// occurrences holds occurrences built ahead, when recurLoop stores their
// templates, so that a second's occurrences of many schedules cost the
// forwarder a lookup each rather than a decode, a cron computation and an
// encode while they all fall due together. Keyed by a hash of the
// template's id and the due time (building the occurrence id and looking
// it up as a string was a third of the forwarder's time an occurrence);
// each is taken only with its own id and its template's checksum (a
// template replaced or rescheduled under the same id is not taken for
// another; two occurrences of one hash keep the later, the other is built
// when it falls due); one not taken by a minute past
// its due time (the schedule was deleted or moved) is dropped. A miss
// (after a restart, a failover, for the first occurrence) builds the
// occurrence then.
type occurrences struct {
	mu    sync.Mutex
	m     map[uint64]*builtOccurrence
	seed  maphash.Seed
	swept time.Time
}

// builtOccurrence is a template's occurrence, ready to forward.
type builtOccurrence struct {
	crc     uint32 // the template's
	due     int64
	msg     []byte
	subject string
	id      string
	cs      CronSchedule
	after   int64 // the next occurrence (cs.Next(due)), when afterOK
	afterOK bool
}

// Occurrences are built ahead only when due within builtAhead, and at most
// maxBuilt are kept.
const (
	builtAhead = 10 * time.Minute
	maxBuilt   = 1 << 18
)

func newOccurrences() *occurrences {
	return &occurrences{m: map[uint64]*builtOccurrence{}, seed: maphash.MakeSeed()}
}

// key is the map key of template tmplID's occurrence due at due (keyOf:
// the same from the id as a string).
func (o *occurrences) key(tmplID []byte, due int64) uint64 {
	return maphash.Bytes(o.seed, tmplID) ^ uint64(due)*0x9e3779b97f4a7c15
}

func (o *occurrences) keyOf(tmplID string, due int64) uint64 {
	return maphash.String(o.seed, tmplID) ^ uint64(due)*0x9e3779b97f4a7c15
}

// build builds ahead the occurrence of template tmpl (nothing when it falls
// due later than builtAhead from now, or the store is full).
func (o *occurrences) build(tmpl []byte, now time.Time, limits protocol.Limits) {
	o.buildNext(tmpl, nil, nil, now, limits)
}

// buildNext is build for the template stored again after prev's (nil: not
// known) occurrence, with the recurrence cs (nil: parsed from tmpl): the
// occurrence is prev's with its time patched (occurrenceAt), which costs a
// copy and a checksum instead of a decode and an encode.
func (o *occurrences) buildNext(tmpl []byte, prev *builtOccurrence, cs *CronSchedule, now time.Time, limits protocol.Limits) {
	due := int64(binary.BigEndian.Uint64(tmpl[16:24]))
	if due > now.Add(builtAhead).UnixMilli() {
		return
	}
	b := &builtOccurrence{crc: binary.BigEndian.Uint32(tmpl[0:4]), due: due}
	if prev != nil && cs != nil {
		if b.msg = occurrenceAt(prev.msg, prev.due, due); b.msg != nil {
			digits := len(strconv.FormatInt(due, 10))
			b.subject, b.id = prev.subject, prev.id[:len(prev.id)-digits]+strconv.FormatInt(due, 10)
			b.cs = *cs
		}
	}
	if b.msg == nil {
		v, err := protocol.ParseMessageNoCRC(tmpl)
		if err != nil {
			return
		}
		c, _, err := ParseCron(&v)
		if err != nil {
			return
		}
		if b.msg, err = occurrenceOf(&v, due, limits); err != nil {
			return
		}
		b.subject, b.id, b.cs = string(v.Subject), occurrenceID(v.ID, due), c
	}
	b.after, b.afterOK = b.cs.Next(due)
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Sub(o.swept) > time.Minute {
		o.swept = now
		for k, b := range o.m {
			if b.due < now.Add(-time.Minute).UnixMilli() {
				delete(o.m, k)
			}
		}
	}
	if len(o.m) < maxBuilt {
		o.m[o.keyOf(b.id[:len(b.id)-len(strconv.FormatInt(due, 10))-1], due)] = b
	}
}

// take returns (and forgets) the occurrence of template v due at due, if
// it was built ahead from the same template.
func (o *occurrences) take(v *protocol.View, due int64) *builtOccurrence {
	if o == nil {
		return nil
	}
	k := o.key(v.ID, due)
	o.mu.Lock()
	b, ok := o.m[k]
	if ok {
		delete(o.m, k)
	}
	o.mu.Unlock()
	if !ok || b.crc != binary.BigEndian.Uint32(v.Raw[0:4]) || b.due != due || !isOccurrenceOf(b.id, v.ID) {
		return nil
	}
	return b
}

// isOccurrenceOf reports whether id is "<tmplID>.<due ms>" for tmplID (due
// is compared on its own).
func isOccurrenceOf(id string, tmplID []byte) bool {
	return len(id) > len(tmplID) && id[len(tmplID)] == '.' && id[:len(tmplID)] == string(tmplID)
}
