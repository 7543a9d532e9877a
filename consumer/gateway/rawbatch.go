package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Raw publish (POST /v1/subjects/{subject}/publish): the request body is
// one message's body, or with one of the batch media types below many
// bodies, in the formats of nsqd's HTTP /mpub. The headers describe every
// message of the request, as the JSON form's fields describe one. The
// names are in net/http's canonical form ("Qmq-Id" for QMQ-Id) and read
// from the header map directly: Header.Get canonicalised each name into a
// new string, a quarter of the gateway's allocations on raw batches.
const (
	headerID          = "Qmq-Id"
	headerTags        = "Qmq-Tags"       // comma-separated
	headerProperties  = "Qmq-Properties" // URL query encoding: a=1&b=2
	headerDeliverAt   = "Qmq-Deliver-At" // RFC 3339
	headerDelay       = "Qmq-Delay"      // Go duration
	headerScheduleKey = "Qmq-Schedule-Key"
	headerReplace     = "Qmq-Replace" // true: replace the pending message with the key
	headerExpireAt    = "Qmq-Expire-At"
)

// header is h's first value of the canonical name key.
func header(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// headerName is a canonical header name as the API documents it.
func headerName(key string) string { return "QMQ" + key[3:] }

// The batch media types of the raw publish route.
const (
	// MediaTypeLines is a batch of bodies separated by "\n" (one more at
	// the end is allowed), as nsqd's /mpub takes them. A body can hold
	// neither a newline nor be empty: an empty line is refused.
	MediaTypeLines = "application/vnd.qmq.mpub"
	// MediaTypeBinary is a batch as nsqd's /mpub?binary=true takes it: a
	// 4-byte big-endian count, then each body after its 4-byte big-endian
	// length. Any bytes, empty bodies included.
	MediaTypeBinary = "application/vnd.qmq.mpub-binary"
)

// rawForm is how a raw publish's body holds its messages.
type rawForm int

const (
	rawOne    rawForm = iota // the body is one message's body
	rawLines                 // MediaTypeLines
	rawBinary                // MediaTypeBinary
)

// rawFormOf reads the form from a Content-Type header (parameters
// ignored); any other media type is one message.
func rawFormOf(ct string) rawForm {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	switch {
	case strings.EqualFold(ct, MediaTypeLines):
		return rawLines
	case strings.EqualFold(ct, MediaTypeBinary):
		return rawBinary
	}
	return rawOne
}

// rawOptions reads the QMQ-* headers of a raw publish into the fields of a
// message; a batch takes neither an id nor a schedule key (each names one
// message).
func rawOptions(r *http.Request, subject string, batch bool) (PublishMessage, *Problem) {
	h := r.Header
	pm := PublishMessage{Subject: subject, ID: header(h, headerID), Delay: header(h, headerDelay), ScheduleKey: header(h, headerScheduleKey)}
	if batch && pm.ID != "" {
		return pm, badRequest(headerName(headerID) + ": names one message; a batch's messages get ids from the gateway")
	}
	if batch && pm.ScheduleKey != "" {
		return pm, badRequest(headerName(headerScheduleKey) + ": names one message; publish keyed messages one a request")
	}
	if t := header(h, headerTags); t != "" {
		pm.Tags = splitList(t)
	}
	if v := header(h, headerProperties); v != "" {
		q, err := url.ParseQuery(v)
		if err != nil {
			return pm, badRequest(headerName(headerProperties) + ": want URL query encoding (a=1&b=2): " + err.Error())
		}
		pm.Properties = make(map[string]string, len(q))
		for k, v := range q {
			pm.Properties[k] = strings.Join(v, ",")
		}
	}
	for _, t := range []struct {
		name string
		dst  **time.Time
	}{{headerDeliverAt, &pm.DeliverAt}, {headerExpireAt, &pm.ExpireAt}} {
		if v := h.Get(t.name); v != "" {
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return pm, badRequest(headerName(t.name) + ": want an RFC 3339 time: " + err.Error())
			}
			*t.dst = &at
		}
	}
	switch v := header(h, headerReplace); {
	case v == "" || strings.EqualFold(v, "false"):
	case strings.EqualFold(v, "true"):
		pm.Replace = true
	default:
		return pm, badRequest(headerName(headerReplace) + ": want true or false")
	}
	return pm, nil
}

// errBatch: a batch body does not hold what its media type says.
var errBatch = errors.New("malformed batch")

// splitLines appends the bodies of a MediaTypeLines batch to bodies, each
// a slice of data (no copy); at most max of them, else it returns n > max
// and no bodies.
func splitLines(data []byte, max int, bodies [][]byte) ([][]byte, int, error) {
	if len(data) > 0 && data[len(data)-1] == '\n' {
		data = data[:len(data)-1]
	}
	if len(data) == 0 {
		return bodies, 0, fmt.Errorf("%w: no message in the body", errBatch)
	}
	if n := bytes.Count(data, []byte{'\n'}) + 1; n > max {
		return bodies, n, nil
	}
	for k := 1; ; k++ {
		i := bytes.IndexByte(data, '\n')
		line := data
		if i >= 0 {
			line = data[:i]
		}
		if len(line) == 0 {
			return bodies, k, fmt.Errorf("%w: line %d is empty: in %s every line is one message body, so a body can be neither empty nor hold a newline (send such bodies as %s)",
				errBatch, k, MediaTypeLines, MediaTypeBinary)
		}
		bodies = append(bodies, line[:len(line):len(line)])
		if i < 0 {
			return bodies, k, nil
		}
		data = data[i+1:]
	}
}

// splitBinary appends the bodies of a MediaTypeBinary batch to bodies,
// each a slice of data (no copy); at most max of them, else it returns
// n > max and no bodies.
func splitBinary(data []byte, max int, bodies [][]byte) ([][]byte, int, error) {
	if len(data) < 4 {
		return bodies, 0, fmt.Errorf("%w: %d bytes, too short for the 4-byte message count", errBatch, len(data))
	}
	n := int(binary.BigEndian.Uint32(data))
	switch {
	case n == 0:
		return bodies, 0, fmt.Errorf("%w: a count of 0 messages", errBatch)
	case n > max:
		return bodies, n, nil
	}
	data = data[4:]
	for k := 1; k <= n; k++ {
		if len(data) < 4 {
			return bodies, n, fmt.Errorf("%w: the body ends before message %d of %d", errBatch, k, n)
		}
		size := binary.BigEndian.Uint32(data)
		if uint64(size) > uint64(len(data)-4) {
			return bodies, n, fmt.Errorf("%w: message %d of %d has %d bytes, the body %d more", errBatch, k, n, size, len(data)-4)
		}
		bodies = append(bodies, data[4:4+size:4+size])
		data = data[4+size:]
	}
	if len(data) > 0 {
		return bodies, n, fmt.Errorf("%w: %d bytes after the %d messages the count announced", errBatch, len(data), n)
	}
	return bodies, n, nil
}

// AppendBinaryBatch appends bodies to b as a MediaTypeBinary batch (for
// Go clients and tests).
func AppendBinaryBatch(b []byte, bodies ...[]byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(bodies)))
	for _, body := range bodies {
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
	}
	return b
}

// bodyProblem is the problem document of a raw body that could not be
// read.
func bodyProblem(err error) *Problem {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return newProblem(http.StatusRequestEntityTooLarge, protocol.StatusTooLarge,
			fmt.Sprintf("request body over the gateway's limit of %d bytes", tooBig.Limit))
	}
	return badRequest("reading the body: " + err.Error())
}
