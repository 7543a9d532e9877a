package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// publish serves POST /v1/publish: a JSON batch.
func (s *Server) publish(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	sc := publishPool.Get().(*publishScratch)
	data, err := readBodyInto(w, r, s.opts.MaxBodyBytes, sc.body)
	if err != nil {
		publishPool.Put(sc)
		return jsonProblem(err)
	}
	sc.body = data[:0]
	req := PublishRequest{Messages: sc.msgs[:0]}
	if req.decodeFast(data) {
		sc.msgs = req.Messages[:0]
	} else {
		req = PublishRequest{}
		if p := decodeGoJSON(data, &req); p != nil {
			publishPool.Put(sc)
			return p
		}
	}
	switch n := len(req.Messages); {
	case n == 0:
		publishPool.Put(sc)
		return badRequest("messages: at least one message")
	case n > s.opts.MaxBatch:
		publishPool.Put(sc)
		return newProblem(http.StatusRequestEntityTooLarge, protocol.StatusTooLarge,
			fmt.Sprintf("%d messages in one request, the gateway's limit is %d", n, s.opts.MaxBatch))
	}
	now := time.Now()
	// One array of messages, decoded straight from the request; SendBatch
	// encodes them into one send request.
	n := len(req.Messages)
	sc.size(n)
	ms, msgs, errs := sc.ms[:n], sc.ptrs[:n], sc.errs[:n]
	detachStrings(req.Messages)
	for i := range req.Messages {
		msgs[i] = nil
		if errs[i] = req.Messages[i].toMessage(&ms[i], now); errs[i] == nil {
			msgs[i] = &ms[i]
		}
	}
	p := s.sendAll(w, r, id, msgs, errs, sc)
	// What the request decoded aliases sc's buffers: they are reused once
	// nothing can hold them (a problem document still to be written holds
	// results; messages of a request whose context ended may still be on
	// their way in the producer).
	if p == nil && r.Context().Err() == nil {
		sc.put()
	}
	return p
}

// detachStrings copies the strings of msgs that outlive the request: the
// fast decoder's strings alias the request buffer, which the next request
// reuses. The subject does outlive it (the producer's and the meta
// client's route caches key on it: a key whose bytes changed under its map
// crashed pkg/metaclient's watchLoop, and the producer's cache filled with
// such keys), and so may an id the client chose (in errors, trace spans).
// Bodies, tags and properties are encoded into the send request before
// SendBatch returns: they stay where they are. A batch's messages mostly
// share a subject: it is copied once.
func detachStrings(msgs []PublishMessage) {
	var last string
	for i := range msgs {
		m := &msgs[i]
		if m.Subject != last || len(last) == 0 {
			last = strings.Clone(m.Subject)
		}
		m.Subject = last
		if m.ID != "" {
			m.ID = strings.Clone(m.ID)
		}
	}
}

// publishScratch holds a publish request's buffers, reused across
// requests: the body, the decoded messages, the producer's messages, their
// outcomes and the answer (these were most of the gateway's allocations).
type publishScratch struct {
	body    []byte
	bodies  [][]byte
	msgs    []PublishMessage
	ms      []protocol.Message
	ptrs    []*protocol.Message
	send    []*protocol.Message
	errs    []error
	results []PublishResult
	out     []byte
}

var publishPool = sync.Pool{New: func() any { return new(publishScratch) }}

// size makes room for n messages.
func (sc *publishScratch) size(n int) {
	if cap(sc.ms) < n {
		sc.ms = make([]protocol.Message, n)
		sc.ptrs = make([]*protocol.Message, n)
		sc.send = make([]*protocol.Message, 0, n)
		sc.errs = make([]error, n)
		sc.results = make([]PublishResult, n)
	}
}

// put keeps sc for another request unless it grew past what is worth
// keeping.
func (sc *publishScratch) put() {
	if cap(sc.body) <= 4<<20 && cap(sc.ms) <= 4096 {
		publishPool.Put(sc)
	}
}

// publishRaw serves POST /v1/subjects/{subject}/publish: the request body
// is one message's body, or a batch of bodies in MediaTypeLines or
// MediaTypeBinary; the QMQ-* headers describe every message. The body is
// read into one pooled buffer and each message's body is a slice of it
// (SendBatch copies it into the send request): no JSON, no copy.
func (s *Server) publishRaw(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	form := rawFormOf(header(r.Header, "Content-Type"))
	pm, p := rawOptions(r, r.PathValue("subject"), form != rawOne)
	if p != nil {
		return p
	}
	sc := publishPool.Get().(*publishScratch)
	data, err := readBodyInto(w, r, s.opts.MaxBodyBytes, sc.body)
	if err != nil {
		publishPool.Put(sc)
		return bodyProblem(err)
	}
	sc.body = data[:0]
	bodies, n := append(sc.bodies[:0], data), 1
	switch form {
	case rawLines:
		bodies, n, err = splitLines(data, s.opts.MaxBatch, sc.bodies[:0])
	case rawBinary:
		bodies, n, err = splitBinary(data, s.opts.MaxBatch, sc.bodies[:0])
	}
	sc.bodies = bodies[:0]
	switch {
	case err != nil:
		publishPool.Put(sc)
		return badRequest(err.Error())
	case n > s.opts.MaxBatch:
		publishPool.Put(sc)
		return newProblem(http.StatusRequestEntityTooLarge, protocol.StatusTooLarge,
			fmt.Sprintf("%d messages in one request, the gateway's limit is %d", n, s.opts.MaxBatch))
	}
	// Every message is the one the headers describe, with its own body.
	var tmpl protocol.Message
	terr := pm.toMessage(&tmpl, time.Now())
	if terr == nil && len(tmpl.Properties) > 0 {
		// Full slices: whoever adds a property to one message (a trace
		// context) copies instead of writing into the others'.
		tmpl.Properties = tmpl.Properties[:len(tmpl.Properties):len(tmpl.Properties)]
	}
	sc.size(n)
	ms, msgs, errs := sc.ms[:n], sc.ptrs[:n], sc.errs[:n]
	for i, b := range bodies {
		ms[i] = tmpl
		ms[i].Body = b
		msgs[i], errs[i] = &ms[i], terr
		if terr != nil {
			msgs[i] = nil
		}
	}
	p = s.sendAll(w, r, id, msgs, errs, sc)
	if p == nil && r.Context().Err() == nil {
		sc.put()
	}
	return p
}

// sendAll sends msgs (those without an error in errs) and answers with
// every message's outcome once each is stored or failed: 200 when all are
// stored, a problem when all failed alike (429 with Retry-After for
// back-pressure), 207 with the per-message statuses otherwise.
// sc, when set, lends its buffers.
func (s *Server) sendAll(w http.ResponseWriter, r *http.Request, id *identity, msgs []*protocol.Message, errs []error, sc *publishScratch) *Problem {
	n := int64(len(msgs))
	if s.inFlight.Add(n) > int64(s.opts.MaxInFlight) {
		s.inFlight.Add(-n)
		return busy(fmt.Sprintf("the gateway is publishing %d messages, its limit", s.opts.MaxInFlight))
	}
	defer s.inFlight.Add(-n)
	// The valid messages, in one producer.SendBatch: one send request per
	// broker group, no queued record or callback per message.
	send := msgs
	valid := 0
	for _, err := range errs {
		if err == nil {
			valid++
		}
	}
	if valid < len(msgs) {
		send = make([]*protocol.Message, 0, valid)
		if sc != nil && cap(sc.send) >= valid {
			send = sc.send[:0]
		}
		for i, m := range msgs {
			if errs[i] == nil {
				send = append(send, m)
			}
		}
	}
	if valid > 0 {
		if serrs := id.producer.SendBatch(r.Context(), send); serrs != nil {
			k := 0
			for i := range msgs {
				if errs[i] == nil {
					errs[i] = serrs[k]
					k++
				}
			}
		}
	}
	if errsNil(errs) && preferMinimal(r) {
		// All stored, and the client asked for their count only.
		s.mets.stored.Add(float64(len(msgs)))
		var out []byte
		if sc != nil {
			out = sc.out
		}
		out = writeStoredInto(w, len(msgs), out)
		if sc != nil {
			sc.out = out[:0]
		}
		return nil
	}
	res := PublishResponse{}
	if sc != nil && cap(sc.results) >= len(msgs) {
		res.Results = sc.results[:len(msgs)]
	} else {
		res.Results = make([]PublishResult, len(msgs))
	}
	failed, same := 0, protocol.StatusOK
	for i, err := range errs {
		r := PublishResult{Status: statusOK}
		if msgs[i] != nil {
			r.ID = msgs[i].ID
		}
		if err != nil {
			st := statusOf(err)
			r.Status, r.Error = st.String(), err.Error()
			if failed == 0 {
				same = st
			} else if st != same {
				same = protocol.StatusInternal // mixed
			}
			failed++
			s.mets.published.WithLabelValues(r.Status).Inc()
		}
		res.Results[i] = r
	}
	if ok := len(errs) - failed; ok > 0 {
		s.mets.stored.Add(float64(ok))
	}
	var out []byte
	if sc != nil {
		out = sc.out
	}
	switch {
	case failed == 0:
		out = writePublishResponseInto(w, http.StatusOK, &res, out)
	case failed == len(errs) && same != protocol.StatusInternal:
		p := newProblem(httpStatus(same), same, fmt.Sprintf("%d of %d messages failed: %s", failed, len(errs), firstError(res.Results)))
		if p.Status == http.StatusTooManyRequests || p.Status == http.StatusServiceUnavailable {
			p.RetryAfterSeconds = 1
		}
		p.Results = res.Results
		return p
	default:
		out = writePublishResponseInto(w, http.StatusMultiStatus, &res, out)
	}
	if sc != nil {
		sc.out = out[:0]
	}
	return nil
}

// statusOK is the status name of a stored message.
var statusOK = protocol.StatusOK.String()

// errsNil reports whether every error of errs is nil.
func errsNil(errs []error) bool {
	for _, err := range errs {
		if err != nil {
			return false
		}
	}
	return true
}

func firstError(rs []PublishResult) string {
	for _, r := range rs {
		if r.Error != "" {
			return r.Error
		}
	}
	return ""
}
