package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
)

// Scheduled-message control: cancel and reschedule pending delayed messages
// of a subject by schedule key or message id, through the caller's
// producer (producer.CancelBatch and RescheduleBatch: one request per delay
// group of the subject), with the producer's definite answers.

// ScheduleTarget names a pending delayed message: by its schedule key or
// by its message id (exactly one). A reschedule gives the new due time as
// deliverAt (RFC 3339) or delay (a Go duration from now, such as "90s").
type ScheduleTarget struct {
	Key       string     `json:"key,omitempty"`
	ID        string     `json:"id,omitempty"`
	DeliverAt *time.Time `json:"deliverAt,omitempty"`
	Delay     string     `json:"delay,omitempty"`
}

// ScheduleRequest is the body of a cancel or a reschedule.
type ScheduleRequest struct {
	Targets []ScheduleTarget `json:"targets"`
}

// ScheduleResult is one target's answer. Status is definite for
// "cancelled" and "rescheduled" (it will never be delivered at its old
// time), "already fired" (it has been or will be delivered as it was) and
// "not found"; any other status (such as "unavailable") leaves the message
// as it was or not, and Error says why.
type ScheduleResult struct {
	Key    string `json:"key,omitempty"`
	ID     string `json:"id,omitempty"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// ScheduleResponse lists the answers in the order of the targets.
type ScheduleResponse struct {
	Results []ScheduleResult `json:"results"`
}

// cancel serves POST /v1/subjects/{subject}/scheduled/cancel.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	return s.control(w, r, id, false)
}

// reschedule serves POST /v1/subjects/{subject}/scheduled/reschedule.
func (s *Server) reschedule(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	return s.control(w, r, id, true)
}

// control cancels or reschedules the request's targets. It answers 200
// when every target got a definite answer, a problem when every target
// failed with one status, and 207 otherwise.
func (s *Server) control(w http.ResponseWriter, r *http.Request, id *identity, move bool) *Problem {
	subject := r.PathValue("subject")
	if err := protocol.DefaultLimits.CheckSubject(subject); err != nil {
		return badRequest(err.Error())
	}
	var req ScheduleRequest
	if p := decodeJSON(w, r, s.opts.MaxBodyBytes, &req); p != nil {
		return p
	}
	switch n := len(req.Targets); {
	case n == 0:
		return badRequest("targets: at least one target")
	case n > s.opts.MaxBatch:
		return newProblem(http.StatusRequestEntityTooLarge, protocol.StatusTooLarge,
			fmt.Sprintf("%d targets in one request, the gateway's limit is %d", n, s.opts.MaxBatch))
	}
	now := time.Now()
	targets := make([]producer.CancelTarget, len(req.Targets))
	dues := make([]time.Time, len(req.Targets))
	for i, t := range req.Targets {
		switch {
		case (t.Key == "") == (t.ID == ""):
			return badRequest(fmt.Sprintf("target %d: give key or id, one of them", i))
		case t.ID != "":
			targets[i] = producer.CancelTarget{Subject: subject, Key: t.ID, ByID: true}
		default:
			targets[i] = producer.CancelTarget{Subject: subject, Key: t.Key}
		}
		if !move {
			if t.DeliverAt != nil || t.Delay != "" {
				return badRequest(fmt.Sprintf("target %d: a cancel takes no deliverAt or delay", i))
			}
			continue
		}
		at, err := deliverAt(t.DeliverAt, t.Delay, now)
		switch {
		case err != nil:
			return badRequest(fmt.Sprintf("target %d: %v", i, err))
		case at.IsZero():
			return badRequest(fmt.Sprintf("target %d: a reschedule needs deliverAt or a delay", i))
		}
		dues[i] = at
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.SendTimeout)
	defer cancel()
	var errs []error
	if move {
		errs = id.producer.RescheduleBatch(ctx, targets, dues)
	} else {
		errs = id.producer.CancelBatch(ctx, targets)
	}
	done := "cancelled"
	if move {
		done = "rescheduled"
	}
	res := ScheduleResponse{Results: make([]ScheduleResult, len(targets))}
	failed, same := 0, protocol.StatusOK
	for i, err := range errs {
		t := req.Targets[i]
		out := ScheduleResult{Key: t.Key, ID: t.ID, Status: done}
		if err != nil {
			st := statusOf(err)
			out.Status = st.String()
			if !definite(err) {
				out.Error = err.Error()
				if failed == 0 {
					same = st
				} else if st != same {
					same = protocol.StatusInternal // mixed
				}
				failed++
			}
		}
		res.Results[i] = out
	}
	switch {
	case failed == 0:
		writeJSON(w, http.StatusOK, &res)
		return nil
	case failed == len(errs) && same != protocol.StatusInternal:
		p := newProblem(httpStatus(same), same, fmt.Sprintf("%d of %d targets failed: %s", failed, len(errs), res.Results[0].Error))
		if p.Status == http.StatusTooManyRequests || p.Status == http.StatusServiceUnavailable {
			p.RetryAfterSeconds = 1
		}
		return p
	}
	writeJSON(w, http.StatusMultiStatus, &res)
	return nil
}

// definite reports whether a control's error is an answer about the
// message (it fired, or no delay group holds it) rather than a failure.
func definite(err error) bool {
	return errors.Is(err, producer.ErrAlreadyFired) || errors.Is(err, producer.ErrNotFound)
}
