package consumer

import (
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// A pull's messages are built in a handful of allocations, whatever their
// number: one slice of deliveries (each holding its Message), one string
// holding every id, tag and property of the pull (each field a substring of
// it), one slice of tags and one of properties (each message's a capped
// sub-slice, so appending to one reallocates instead of overwriting its
// neighbour's). Building each message on its own cost four or more
// allocations per message, and the garbage collector took a third of a
// busy consumer's CPU. The price: a message kept after its handler returns
// keeps its pull's deliveries and strings alive (the response body it
// aliases was kept anyway), a few kilobytes per pull of 64.

// pullBatch is a puller's reusable scratch for building one pull's messages
// (pullLoop only). It holds no pointers, so filling it costs no write
// barriers; the first version kept each parsed View here, and copying and
// clearing them cost a busy consumer 7% of its CPU in the garbage
// collector's write barriers.
type pullBatch struct {
	text   []byte  // the pull's ids, tags and property keys and values
	idLens []int32 // each message's id length; -1: corrupt
	extras []bool  // each message has tags or properties
}

// build parses the pulled messages into deliveries. Corrupt messages get a
// delivery with a nil msg.
func (b *pullBatch) build(p *puller, items []protocol.PulledMessage, brokerGroup string) []delivery {
	b.text, b.idLens, b.extras = b.text[:0], b.idLens[:0], b.extras[:0]
	ds := make([]delivery, len(items))
	s := p.s
	var tags, props int
	// Pass 1: check and parse each message, fill all but its strings, and
	// gather the strings.
	for i, pm := range items {
		d := &ds[i]
		d.p, d.pullSeq, d.raw = p, pm.PullSeq, pm.Message
		v, err := protocol.ParseMessage(pm.Message)
		if err != nil {
			// The broker checks CRCs on read-back; a bad message here is
			// damage in transit or a broker bug. It cannot be handled.
			p.lg.Error("dropping corrupt message", zap.Uint64("pull_seq", pm.PullSeq), zap.Error(err))
			b.idLens = append(b.idLens, -1)
			b.extras = append(b.extras, false)
			continue
		}
		m := &d.message // zero: set field by field (no copy of a whole Message)
		d.msg = m
		m.Subject = s.subject
		m.Body = v.Body
		m.Created = millisTime(v.CreatedMillis)
		m.DeliverAt = millisTime(v.DeliverAtMillis)
		m.Attempts = int(v.Attempts)
		m.Group = s.group
		m.BrokerGroup = brokerGroup
		m.delivery = d
		b.text = append(b.text, v.ID...)
		b.idLens = append(b.idLens, int32(len(v.ID)))
		nt, np := v.TagCount(), v.PropertyCount()
		b.extras = append(b.extras, nt+np > 0)
		if nt+np == 0 {
			continue
		}
		tags += nt
		props += np
		v.Tags(func(t []byte) bool { b.text = append(b.text, t...); return true })
		v.Properties(func(k, val []byte) bool {
			b.text = append(b.text, k...)
			b.text = append(b.text, val...)
			return true
		})
	}
	text := string(b.text) // the pull's one copy of its strings
	var tagArena []string
	if tags > 0 {
		tagArena = make([]string, 0, tags)
	}
	var propArena []protocol.Property
	if props > 0 {
		propArena = make([]protocol.Property, 0, props)
	}
	at := 0
	cut := func(n int) string {
		s := text[at : at+n]
		at += n
		return s
	}
	// Pass 2: hand out the strings in the order pass 1 gathered them.
	for i := range ds {
		if b.idLens[i] < 0 {
			continue
		}
		m := &ds[i].message
		m.ID = cut(int(b.idLens[i]))
		if !b.extras[i] {
			continue
		}
		v, err := protocol.ParseMessageNoCRC(ds[i].raw)
		if err != nil {
			continue // cannot happen: the same bytes parsed in pass 1
		}
		if v.TagCount() > 0 {
			first := len(tagArena)
			v.Tags(func(t []byte) bool { tagArena = append(tagArena, cut(len(t))); return true })
			m.Tags = tagArena[first:len(tagArena):len(tagArena)]
		}
		if v.PropertyCount() > 0 {
			first := len(propArena)
			v.Properties(func(k, val []byte) bool {
				key := cut(len(k))
				propArena = append(propArena, protocol.Property{Key: key, Value: cut(len(val))})
				return true
			})
			m.Properties = propArena[first:len(propArena):len(propArena)]
		}
	}
	return ds
}
