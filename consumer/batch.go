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
// (pullLoop only).
type pullBatch struct {
	views []protocol.View // parsed messages; Raw nil: corrupt
	text  []byte          // the pull's ids, tags and property keys and values
}

// build parses the pulled messages into deliveries. Corrupt messages get a
// delivery with a nil msg.
func (b *pullBatch) build(p *puller, items []protocol.PulledMessage, brokerGroup string) []delivery {
	b.views = b.views[:0]
	b.text = b.text[:0]
	var tags, props int
	for _, pm := range items {
		v, err := protocol.ParseMessage(pm.Message)
		if err != nil {
			// The broker checks CRCs on read-back; a bad message here is
			// damage in transit or a broker bug. It cannot be handled.
			p.lg.Error("dropping corrupt message", zap.Uint64("pull_seq", pm.PullSeq), zap.Error(err))
			b.views = append(b.views, protocol.View{})
			continue
		}
		b.views = append(b.views, v)
		b.text = append(b.text, v.ID...)
		tags += v.TagCount()
		props += v.PropertyCount()
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
	ds := make([]delivery, len(items))
	at := 0
	cut := func(n int) string {
		s := text[at : at+n]
		at += n
		return s
	}
	s := p.s
	for i, pm := range items {
		d := &ds[i]
		d.p, d.pullSeq, d.raw = p, pm.PullSeq, pm.Message
		v := &b.views[i]
		if v.Raw == nil {
			continue
		}
		m := &d.message
		d.msg = m
		*m = Message{
			Subject:     s.subject,
			ID:          cut(len(v.ID)),
			Body:        v.Body,
			Created:     millisTime(v.CreatedMillis),
			DeliverAt:   millisTime(v.DeliverAtMillis),
			Attempts:    int(v.Attempts),
			Group:       s.group,
			BrokerGroup: brokerGroup,
			delivery:    d,
		}
		if n := v.TagCount(); n > 0 {
			first := len(tagArena)
			v.Tags(func(t []byte) bool { tagArena = append(tagArena, cut(len(t))); return true })
			m.Tags = tagArena[first:len(tagArena):len(tagArena)]
		}
		if n := v.PropertyCount(); n > 0 {
			first := len(propArena)
			v.Properties(func(k, val []byte) bool {
				key := cut(len(k))
				propArena = append(propArena, protocol.Property{Key: key, Value: cut(len(val))})
				return true
			})
			m.Properties = propArena[first:len(propArena):len(propArena)]
		}
	}
	clear(b.views) // drop the references to the response body
	return ds
}
