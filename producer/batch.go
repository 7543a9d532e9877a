package producer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/pkg/msgid"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/tracing"
)

// SendBatch sends msgs and waits until a broker has stored each of them or
// it failed, ctx ended, or the send timeout passed. It returns nil when
// every message is stored, else one error per message (nil for those
// stored), each as Send would return it. It fills in the messages' ID and
// Created when empty.
//
// The messages are encoded in the caller's goroutine and go out as one send
// request per broker group (WithBatch's limits split larger batches), from
// the caller's goroutine and with no hand-off to the send loop: a batch
// costs about what one message costs Send, where SendAsync's messages cost
// a queued record and a callback each. A message whose try fails in a way a
// retry elsewhere may fix (a retryable status, a transport failure, no
// usable group) takes the queued path, with its retries and back-off, as
// SendAsync's would; a refusal (invalid, too large, beyond the horizon,
// forbidden) fails it at once. With tracing on the batch has one send span,
// a child of ctx, whose context a sampled span writes into every message.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	if p.closed.Load() {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = ErrClosed
		}
		return errs
	}
	var span trace.Span
	if p.cfg.tracer != nil {
		span = p.startBatchSpan(ctx, msgs)
	}
	bb := batchPool.Get().(*batchBuf)
	errs := p.sendBatch(ctx, msgs, bb)
	bb.put()
	if span != nil {
		endBatchSendSpan(span, msgs, errs)
	}
	return errs
}

// batchBuf is SendBatch's scratch space, reused: the messages' encodings
// (raw, one buffer), what is known of each (at), the requests, and the
// request body being built.
type batchBuf struct {
	raw  []byte
	at   []batchMsg
	reqs []batchReq
	b    []byte
	list [][]byte
}

// batchMsg is one message of a batch: its bytes raw[start:end] and where
// it goes.
type batchMsg struct {
	start, end int
	kind       route.Kind
	req        int    // index in reqs; -1: not sent directly (failed, or queued)
	avoid      string // the group that failed it
}

// batchReq is one send request of a batch: a group and its messages'
// indexes (a slice of one shared array).
type batchReq struct {
	group   route.Group
	tracked bool
	idx     []int
	bytes   int
}

// sendHeader is the size of a send request's epoch and message count.
const sendHeader = 12

var batchPool = sync.Pool{New: func() any { return new(batchBuf) }}

func (bb *batchBuf) put() {
	if cap(bb.raw) > 4<<20 {
		return
	}
	clear(bb.reqs[:cap(bb.reqs)])
	bb.reqs = bb.reqs[:0]
	bb.list = bb.list[:0]
	batchPool.Put(bb)
}

func (p *Producer) sendBatch(ctx context.Context, msgs []*Message, bb *batchBuf) []error {
	now := p.cfg.now()
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	// Encode every message into one buffer laid out as a send request
	// (protocol.AppendSendRequest: epoch, count, then each message after
	// its length): when the whole batch goes to one group in one request,
	// that buffer is the request, with no copy.
	size := sendHeader
	for _, msg := range msgs {
		size += 4 + msg.EncodedSize() + msgid.Size
	}
	bb.raw = slices.Grow(bb.raw[:0], size) // one allocation, not a doubling chain of copies
	bb.raw = append(bb.raw, make([]byte, sendHeader)...)
	bb.at = bb.at[:0]
	p.fillIDs(msgs, now)
	encoded := 0
	for i, msg := range msgs {
		if msg.Created.IsZero() {
			msg.Created = now
		}
		start := len(bb.raw) + 4
		raw, err := protocol.AppendMessage(append(bb.raw, 0, 0, 0, 0), msg, p.cfg.limits)
		m := batchMsg{start: start, end: len(raw), kind: route.Produce, req: -1}
		if err != nil {
			fail(i, fmt.Errorf("producer: message %s: %w", msg.ID, err))
			raw = raw[:start-4]
			m.start, m.end = start-4, start-4
		} else {
			binary.BigEndian.PutUint32(raw[start-4:], uint32(m.end-start))
			encoded++
			if !msg.DeliverAt.IsZero() && msg.DeliverAt.Sub(now) >= p.cfg.delayMin {
				m.kind = route.ProduceDelay
			}
		}
		bb.raw = raw
		bb.at = append(bb.at, m)
	}
	p.routeBatch(msgs, bb, errs, now)

	// Send the requests: the first from this goroutine, others beside it.
	results := make([]batchResult, len(bb.reqs))
	var wg sync.WaitGroup
	for r := 1; r < len(bb.reqs); r++ {
		wg.Add(1)
		body := p.requestBody(bb, r, nil)
		go func() {
			defer wg.Done()
			results[r] = p.callBatch(ctx, bb.reqs[r], body, now)
		}()
	}
	if len(bb.reqs) > 0 {
		var body []byte
		if len(bb.reqs) == 1 && len(bb.reqs[0].idx) == encoded {
			// Every message, in order: the buffer is the request.
			binary.BigEndian.PutUint64(bb.raw[0:8], bb.reqs[0].group.Epoch)
			binary.BigEndian.PutUint32(bb.raw[8:12], uint32(encoded))
			body = bb.raw
		} else {
			bb.b = p.requestBody(bb, 0, bb.b[:0])
			body = bb.b
		}
		results[0] = p.callBatch(ctx, bb.reqs[0], body, now)
	}
	wg.Wait()

	// Each message's outcome; those a retry may store take the queued path.
	var queued []int
	for r := range bb.reqs {
		req, res := &bb.reqs[r], &results[r]
		for k, i := range req.idx {
			m := &bb.at[i]
			switch err := res.err; {
			case err != nil && ctx.Err() != nil:
				fail(i, fmt.Errorf("producer: message %s: %w (it may still be stored)", msgs[i].ID, ctx.Err()))
			case err != nil:
				var pe *protocol.Error
				if errors.As(err, &pe) && !pe.Status.Retryable() {
					fail(i, fmt.Errorf("producer: message %s to group %s: %w", msgs[i].ID, req.group.Name, err))
					continue
				}
				m.avoid = req.group.Name
				queued = append(queued, i)
			case res.statuses[k].Success():
			case !res.statuses[k].Retryable():
				fail(i, fmt.Errorf("producer: message %s: %w", msgs[i].ID, refusal(res.statuses[k], req.group.Name, bb.raw[m.start:m.end])))
			default:
				m.avoid = req.group.Name
				queued = append(queued, i)
			}
		}
		if res.reroute {
			for k, i := range req.idx {
				if k == 0 || bb.at[i].kind != bb.at[req.idx[k-1]].kind || msgs[i].Subject != msgs[req.idx[k-1]].Subject {
					p.sender.invalidateRoute(bb.at[i].kind, msgs[i].Subject)
				}
			}
		}
	}
	for i := range bb.at {
		if bb.at[i].req < 0 && (errs == nil || errs[i] == nil) {
			queued = append(queued, i) // no usable group now
		}
	}
	if len(queued) > 0 {
		errs = p.queueBatch(ctx, msgs, bb, queued, errs, now)
	}
	return errs
}

// fillIDs gives the messages without an id one, made 32 to a lock and
// held in one string.
func (p *Producer) fillIDs(msgs []*Message, now time.Time) {
	n := 0
	for _, m := range msgs {
		if m.ID == "" {
			n++
		}
	}
	if n == 0 {
		return
	}
	// The bytes are never written again: they are the string, no copy.
	buf := p.ids.AppendNextN(make([]byte, 0, n*msgid.Size), now, n)
	ids := unsafe.String(unsafe.SliceData(buf), len(buf))
	for _, m := range msgs {
		if m.ID == "" {
			m.ID, ids = ids[:msgid.Size], ids[msgid.Size:]
		}
	}
}

// routeBatch picks a group for each message that encoded: one pick per
// route (a batch to one subject goes to one group), and groups the messages
// into requests of at most WithBatch's messages and bytes. A message with
// no usable group now keeps req -1.
func (p *Producer) routeBatch(msgs []*Message, bb *batchBuf, errs []error, now time.Time) {
	s := p.sender
	type choice struct {
		kind  route.Kind
		key   string
		group int // index in groups, -1: none
		req   int // the request being filled for it
	}
	var chosen [4]choice
	picks := chosen[:0]
	s.mu.Lock()
	for i := range bb.at {
		m := &bb.at[i]
		if errs != nil && errs[i] != nil {
			continue
		}
		key := s.cacheKey(msgs[i].Subject)
		c := -1
		for j := range picks {
			if picks[j].kind == m.kind && picks[j].key == key {
				c = j
				break
			}
		}
		if c < 0 {
			e, err := s.resolve(m.kind, msgs[i].Subject, now)
			idx := -1
			if err == nil {
				if idx = s.sel.pick(&e.next, e.groups, "", now); idx >= 0 {
					g := e.groups[idx]
					bb.reqs = append(bb.reqs, batchReq{group: g, tracked: s.sel.tracked(g.Name)})
				}
			}
			picks = append(picks, choice{kind: m.kind, key: key, group: idx, req: len(bb.reqs) - 1})
			c = len(picks) - 1
		}
		if picks[c].group < 0 {
			continue
		}
		size := m.end - m.start
		r := &bb.reqs[picks[c].req]
		if len(r.idx) > 0 && (len(r.idx) >= p.cfg.batchMessages || r.bytes+size > p.cfg.batchBytes) {
			bb.reqs = append(bb.reqs, batchReq{group: r.group, tracked: r.tracked})
			picks[c].req = len(bb.reqs) - 1
			r = &bb.reqs[picks[c].req]
		}
		if r.idx == nil {
			r.idx = make([]int, 0, min(len(msgs)-i, p.cfg.batchMessages))
		}
		r.idx = append(r.idx, i)
		r.bytes += size
		m.req = picks[c].req
	}
	s.mu.Unlock()
}

// requestBody appends request r's body to dst (nil: a buffer of its own).
func (p *Producer) requestBody(bb *batchBuf, r int, dst []byte) []byte {
	req := &bb.reqs[r]
	bb.list = bb.list[:0]
	for _, i := range req.idx {
		bb.list = append(bb.list, bb.raw[bb.at[i].start:bb.at[i].end])
	}
	if dst == nil {
		dst = make([]byte, 0, req.bytes+12+4*len(req.idx))
	}
	return protocol.AppendSendRequest(dst, req.group.Epoch, bb.list)
}

// batchResult is a batch request's outcome: a request that failed (err) or
// a status per message; reroute asks for fresh routes.
type batchResult struct {
	err      error
	statuses []protocol.Status
	reroute  bool
}

// callBatch sends one request of a batch and reads its answer, updating
// the group's health as sendDirect does.
func (p *Producer) callBatch(ctx context.Context, req batchReq, body []byte, now time.Time) batchResult {
	resp, err := p.transport.CallTimeout(ctx, req.group.Addr, protocol.CmdSend, body, p.cfg.requestTime)
	var st []protocol.Status
	if err == nil {
		if st, err = protocol.DecodeSendResponse(resp); err == nil && len(st) != len(req.idx) {
			err = fmt.Errorf("%w: %d statuses for %d messages", protocol.ErrBadRequest, len(st), len(req.idx))
		}
	}
	after := p.cfg.now()
	reroute := false
	for _, x := range st {
		if x == protocol.StatusReadonly || x == protocol.StatusNotRouted || x == protocol.StatusNotMaster || x == protocol.StatusStaleEpoch {
			reroute = true
			break
		}
	}
	if err != nil && ctx.Err() == nil || err == nil && (req.tracked || reroute || after.Sub(now) >= latencyLevels[0]) {
		s := p.sender
		s.mu.Lock()
		if err != nil || reroute {
			s.sel.failed(req.group.Name, after)
		} else {
			s.sel.succeeded(req.group.Name, after.Sub(now), after)
		}
		s.mu.Unlock()
	}
	if err != nil {
		var pe *protocol.Error
		reroute = !errors.As(err, &pe) // a transport failure: the route may be stale
		return batchResult{err: err, reroute: reroute && ctx.Err() == nil}
	}
	return batchResult{statuses: st, reroute: reroute}
}

// queueBatch sends the messages of msgs at queued (indexes) on the queued
// path, with retries, and waits for their outcomes or ctx.
func (p *Producer) queueBatch(ctx context.Context, msgs []*Message, bb *batchBuf, queued []int, errs []error, now time.Time) []error {
	if errs == nil {
		errs = make([]error, len(msgs))
	}
	type outcome struct {
		i   int
		err error
	}
	ch := make(chan outcome, len(queued))
	waiting := 0
	for _, i := range queued {
		m := &bb.at[i]
		raw := bb.raw[m.start:m.end]
		pd, buf, c := p.slab.take(len(raw))
		*pd = pending{raw: append(buf, raw...), chunk: c, subject: msgs[i].Subject, kind: m.kind, id: msgs[i].ID,
			msg: msgs[i], deadline: now.Add(p.cfg.sendTimeout), avoid: m.avoid,
			asyncCB: func(_ *Message, err error) { ch <- outcome{i, err} }}
		if err := p.queuePending(ctx, pd); err != nil {
			pd.chunk = c
			p.slab.put(pd)
			errs[i] = fmt.Errorf("producer: message %s: %w", msgs[i].ID, err)
			continue
		}
		waiting++
	}
	for ; waiting > 0; waiting-- {
		select {
		case o := <-ch:
			errs[o.i] = o.err
		case <-ctx.Done():
			// The rest may still be stored; their outcomes land in ch.
			for _, i := range queued {
				if errs[i] == nil {
					errs[i] = fmt.Errorf("producer: message %s: %w (it may still be stored)", msgs[i].ID, ctx.Err())
				}
			}
			// Those stored before ctx ended keep their nil error.
			for {
				select {
				case o := <-ch:
					errs[o.i] = o.err
				default:
					return errs
				}
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// startBatchSpan starts a batch's send span, a child of ctx; when it is
// sampled every message carries its context.
func (p *Producer) startBatchSpan(ctx context.Context, msgs []*Message) trace.Span {
	ctx, span := p.cfg.tracer.Start(ctx, "send", sendSpanOptions...)
	if span.IsRecording() {
		span.SetName("send " + msgs[0].Subject)
		span.SetAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", msgs[0].Subject),
			attribute.Int("messaging.batch.message_count", len(msgs)))
	}
	if span.SpanContext().IsSampled() {
		var props []protocol.Property
		tracing.Inject(ctx, &props)
		for _, m := range msgs {
			for _, tp := range props {
				m.Properties = tracing.SetProperty(m.Properties, tp.Key, tp.Value)
			}
		}
	}
	return span
}

func endBatchSendSpan(span trace.Span, msgs []*Message, errs []error) {
	if !span.IsRecording() {
		return
	}
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 0 {
		span.RecordError(first)
		span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not stored", failed, len(msgs)))
	}
	span.End()
}
