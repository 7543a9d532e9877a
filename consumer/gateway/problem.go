package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
)

// Problem is an RFC 9457 problem document (application/problem+json).
// Status names the broker's status (protocol.Status names: "invalid",
// "busy", "not found", …) or the gateway's own ("bad request", "too large").
//
//	{"type":"urn:qmq:problem:invalid","title":"invalid","status":400,
//	 "detail":"message 2: subject \"a b\" …","qmqStatus":"invalid"}
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	QMQStatus string `json:"qmqStatus"`
	// Unknown lists the message ids an ack or nack did not find.
	Unknown []string `json:"unknown,omitempty"`
	// Results are the per-message outcomes of a publish that failed as a
	// whole (every message with this status).
	Results []PublishResult `json:"results,omitempty"`
	// RetryAfterSeconds repeats the Retry-After header of a 429 or 503.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

// problemContentType is the media type of every error answer.
const problemContentType = "application/problem+json"

// newProblem builds a problem with HTTP code code for broker status st.
func newProblem(code int, st protocol.Status, detail string) *Problem {
	name := st.String()
	return &Problem{
		Type:      "urn:qmq:problem:" + strings.ReplaceAll(name, " ", "-"),
		Title:     name,
		Status:    code,
		Detail:    detail,
		QMQStatus: name,
	}
}

// writeProblem answers p, with Retry-After when it is set.
func writeProblem(w http.ResponseWriter, p *Problem) {
	if p.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfterSeconds))
	}
	w.Header().Set("Content-Type", problemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// badRequest is a 400 "bad request" problem.
func badRequest(detail string) *Problem {
	return newProblem(http.StatusBadRequest, protocol.StatusBadRequest, detail)
}

// busy is a 429 "busy" problem that asks the client to come back.
func busy(detail string) *Problem {
	p := newProblem(http.StatusTooManyRequests, protocol.StatusBusy, detail)
	p.RetryAfterSeconds = 1
	return p
}

// httpStatus maps a broker status to the HTTP code of a request that
// failed with it.
func httpStatus(st protocol.Status) int {
	switch st {
	case protocol.StatusOK, protocol.StatusDuplicate:
		return http.StatusOK
	case protocol.StatusBadRequest, protocol.StatusInvalid, protocol.StatusBeyondHorizon:
		return http.StatusBadRequest
	case protocol.StatusTooLarge:
		return http.StatusRequestEntityTooLarge
	case protocol.StatusNotFound, protocol.StatusUnknownGroup:
		return http.StatusNotFound
	case protocol.StatusKeyExists:
		return http.StatusConflict
	case protocol.StatusUnauthenticated:
		return http.StatusUnauthorized
	case protocol.StatusForbidden:
		return http.StatusForbidden
	case protocol.StatusBusy, protocol.StatusRetryLater:
		return http.StatusTooManyRequests
	case protocol.StatusReadonly, protocol.StatusNotMaster, protocol.StatusNotRouted, protocol.StatusStoreError,
		protocol.StatusStaleEpoch, protocol.StatusShuttingDown, protocol.StatusUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// statusOf maps a client library error to a broker status.
func statusOf(err error) protocol.Status {
	switch {
	case err == nil:
		return protocol.StatusOK
	case errors.Is(err, producer.ErrQueueFull):
		return protocol.StatusBusy
	case errors.Is(err, producer.ErrClosed), errors.Is(err, consumer.ErrClosed):
		return protocol.StatusShuttingDown
	case errors.Is(err, producer.ErrSendTimeout):
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return pe.Status
		}
		return protocol.StatusUnavailable
	}
	return protocol.StatusOf(err)
}

// errorProblem is the problem document of a request that failed with err.
func errorProblem(err error) *Problem {
	st := statusOf(err)
	p := newProblem(httpStatus(st), st, err.Error())
	if p.Status == http.StatusTooManyRequests || p.Status == http.StatusServiceUnavailable {
		p.RetryAfterSeconds = 1
	}
	return p
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
