package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"

	"errors"
	"fmt"
	gojson "github.com/goccy/go-json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The JSON shapes of the API; openapi.json describes the same.

// PublishRequest is the body of POST /v1/publish.
type PublishRequest struct {
	Messages []PublishMessage `json:"messages"`
}

// PublishMessage is one message to publish. Body is UTF-8 text unless
// BodyEncoding is "base64". DeliverAt (RFC 3339) or Delay (a Go duration:
// "1500ms", "2h") makes it a delayed message; at most one of them.
type PublishMessage struct {
	Subject      string            `json:"subject"`
	ID           string            `json:"id,omitempty"`
	Tags         []string          `json:"tags,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	Body         string            `json:"body"`
	BodyEncoding string            `json:"bodyEncoding,omitempty"`
	DeliverAt    *time.Time        `json:"deliverAt,omitempty"`
	Delay        string            `json:"delay,omitempty"`
	// ScheduleKey names a delayed message: unique per subject among its
	// pending messages (another send with the key is refused "key exists",
	// or replaces the pending one with Replace), and the name cancel and
	// reschedule take. ExpireAt: past it the message is not delivered.
	ScheduleKey string     `json:"scheduleKey,omitempty"`
	Replace     bool       `json:"replace,omitempty"`
	ExpireAt    *time.Time `json:"expireAt,omitempty"`
}

// PublishResponse answers a publish: one result per message, in order.
type PublishResponse struct {
	Results []PublishResult `json:"results"`
}

// PublishResult is one message's outcome: Status is "ok" (stored
// durably), "duplicate" (stored before) or a broker failure status, with
// Error saying why.
type PublishResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// PulledMessage is a message in a pull answer or an SSE event.
type PulledMessage struct {
	ID           string            `json:"id"`
	Subject      string            `json:"subject"`
	Tags         []string          `json:"tags,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	Body         string            `json:"body"`
	BodyEncoding string            `json:"bodyEncoding"`
	Created      time.Time         `json:"created"`
	DeliverAt    *time.Time        `json:"deliverAt,omitempty"`
	Attempts     int               `json:"attempts"`
	BrokerGroup  string            `json:"brokerGroup"`
}

// PullResponse answers a pull; Messages is empty when the wait ended first.
type PullResponse struct {
	Messages []PulledMessage `json:"messages"`
}

// AckRequest is the body of ack and nack. RetryAfter (a Go duration) is
// for nack only: when the messages come back (default: the consumer's
// back-off, 5 s doubling).
type AckRequest struct {
	Consumer   string   `json:"consumer"`
	IDs        []string `json:"ids"`
	RetryAfter string   `json:"retryAfter,omitempty"`
}

// AckResponse counts the messages acked or nacked.
type AckResponse struct {
	Done int `json:"done"`
}

const (
	encodingUTF8   = "utf8"
	encodingBase64 = "base64"
)

// decodeJSON reads a JSON body into v strictly: unknown fields, trailing
// data and bodies over the limit are errors, as a problem document. The
// common shapes of publish and ack bodies take the decoder of
// fastjson.go; everything else goccy/go-json's.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) *Problem {
	// The whole body first: goccy/go-json's decoder reports a reader's
	// error (the limit passed) as the end of the input.
	data, err := readBody(w, r, limit)
	if err != nil {
		return jsonProblem(err)
	}
	if f, ok := v.(interface{ decodeFast([]byte) bool }); ok && f.decodeFast(data) {
		return nil
	}
	return decodeGoJSON(data, v)
}

// decodeGoJSON decodes data into v strictly with goccy/go-json.
func decodeGoJSON(data []byte, v any) *Problem {
	dec := gojson.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return jsonProblem(err)
		}
		return badRequest("malformed JSON: data after the document")
	}
	return nil
}

// readBody reads the request body, at most limit bytes, into a buffer
// sized from Content-Length when the client sent one (io.ReadAll's
// doubling copied a 30 KB publish four times).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	return readBodyInto(w, r, limit, nil)
}

// readBodyInto is readBody into buf's capacity when it is large enough.
func readBodyInto(w http.ResponseWriter, r *http.Request, limit int64, buf []byte) ([]byte, error) {
	// A body of a known length over the limit is refused unread; one of a
	// known length within it cannot grow past it (net/http stops there).
	// Only a chunked body needs the limiting reader (an allocation).
	var rd io.Reader = r.Body
	switch {
	case r.ContentLength > limit:
		return nil, &http.MaxBytesError{Limit: limit}
	case r.ContentLength < 0:
		rd = http.MaxBytesReader(w, r.Body, limit)
	}
	size := int64(512)
	if n := r.ContentLength; n > 0 {
		size = min(n, limit) + 1 // room to read the end of the body
	}
	b := buf[:0]
	if int64(cap(b)) < size {
		b = make([]byte, 0, size)
	}
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

func jsonProblem(err error) *Problem {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return newProblem(http.StatusRequestEntityTooLarge, protocol.StatusTooLarge,
			fmt.Sprintf("request body over the gateway's limit of %d bytes", tooBig.Limit))
	}
	if errors.Is(err, io.EOF) {
		return badRequest("malformed JSON: empty body")
	}
	if strings.HasPrefix(err.Error(), "json: unknown field") {
		return badRequest("unknown field: " + strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("malformed JSON: " + err.Error())
}

// toMessage checks pm and builds the message to send in m; now anchors
// Delay.
func (pm *PublishMessage) toMessage(m *protocol.Message, now time.Time) error {
	if err := protocol.DefaultLimits.CheckSubject(pm.Subject); err != nil {
		return err
	}
	*m = protocol.Message{Subject: pm.Subject, ID: pm.ID, Tags: pm.Tags}
	switch pm.BodyEncoding {
	case "", encodingUTF8:
		// The producer encodes the message in SendBatch, before it
		// returns, and never writes to Body: the decoded string's bytes
		// serve as the body without a second copy.
		m.Body = unsafe.Slice(unsafe.StringData(pm.Body), len(pm.Body))
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(pm.Body)
		if err != nil {
			return protocol.Errorf(protocol.StatusInvalid, "body is not valid base64: "+err.Error())
		}
		m.Body = b
	default:
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("bodyEncoding %q: want utf8 or base64", pm.BodyEncoding))
	}
	if len(pm.Properties) > 0 {
		m.Properties = make([]protocol.Property, 0, len(pm.Properties))
		for k, v := range pm.Properties {
			m.Properties = append(m.Properties, protocol.Property{Key: k, Value: v})
		}
	}
	at, err := deliverAt(pm.DeliverAt, pm.Delay, now)
	if err != nil {
		return err
	}
	m.DeliverAt = at
	if pm.Replace && pm.ScheduleKey == "" {
		return protocol.Errorf(protocol.StatusInvalid, "replace: only with a scheduleKey")
	}
	if pm.ScheduleKey != "" || pm.ExpireAt != nil {
		m.Properties = setScheduleProperties(m.Properties, pm.ScheduleKey, pm.Replace, pm.ExpireAt)
	}
	return nil
}

// setScheduleProperties sets the properties that carry a schedule key, its
// replace option and an expiry (protocol.PropScheduleKey,
// PropScheduleReplace, PropExpireAt), over any given as properties.
func setScheduleProperties(props []protocol.Property, key string, replace bool, expireAt *time.Time) []protocol.Property {
	set := func(k, v string) {
		for i := range props {
			if props[i].Key == k {
				props[i].Value = v
				return
			}
		}
		props = append(props, protocol.Property{Key: k, Value: v})
	}
	if key != "" {
		set(protocol.PropScheduleKey, key)
	}
	if replace {
		set(protocol.PropScheduleReplace, "1")
	}
	if expireAt != nil {
		set(protocol.PropExpireAt, strconv.FormatInt(expireAt.UnixMilli(), 10))
	}
	return props
}

// deliverAt turns a deliverAt time or a delay into the due time (zero: now).
func deliverAt(at *time.Time, delay string, now time.Time) (time.Time, error) {
	switch {
	case at != nil && delay != "":
		return time.Time{}, protocol.Errorf(protocol.StatusInvalid, "give deliverAt or delay, not both")
	case at != nil:
		return *at, nil
	case delay != "":
		d, err := time.ParseDuration(delay)
		if err != nil || d < 0 {
			return time.Time{}, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("delay %q: want a non-negative duration such as 1500ms or 2h", delay))
		}
		if d == 0 {
			return time.Time{}, nil
		}
		return now.Add(d), nil
	}
	return time.Time{}, nil
}

// pulledMessage renders m as a PulledMessage (appendPulled writes the same
// JSON by hand; its test holds them equal): base64 when encoding asks for it or when the body
// is not UTF-8 text, utf8 otherwise.
func pulledMessage(m *consumer.Message, encoding string) PulledMessage {
	pm := PulledMessage{
		ID: m.ID, Subject: m.Subject, Tags: m.Tags, Created: m.Created.UTC(),
		Attempts: m.Attempts, BrokerGroup: m.BrokerGroup,
	}
	if len(m.Properties) > 0 {
		pm.Properties = make(map[string]string, len(m.Properties))
		for _, p := range m.Properties {
			pm.Properties[p.Key] = p.Value
		}
	}
	if !m.DeliverAt.IsZero() {
		t := m.DeliverAt.UTC()
		pm.DeliverAt = &t
	}
	if encoding != encodingBase64 {
		// utf8 (asked for or chosen) only for text that is UTF-8.
		encoding = encodingUTF8
		if !utf8.Valid(m.Body) {
			encoding = encodingBase64
		}
	}
	pm.BodyEncoding = encoding
	if encoding == encodingBase64 {
		pm.Body = base64.StdEncoding.EncodeToString(m.Body)
	} else {
		pm.Body = string(m.Body)
	}
	return pm
}

// appendPulled appends m as a PulledMessage (the same JSON as
// json.Marshal(pulledMessage(m, encoding)), encoded by hand: reflection
// took a fifth of a busy consumer's gateway CPU).
func appendPulled(b []byte, m *consumer.Message, encoding string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, m.ID)
	b = append(b, `,"subject":`...)
	b = appendJSONString(b, m.Subject)
	if len(m.Tags) > 0 {
		b = append(b, `,"tags":[`...)
		for i, t := range m.Tags {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, t)
		}
		b = append(b, ']')
	}
	if len(m.Properties) > 0 {
		props := slices.Clone(m.Properties)
		slices.SortFunc(props, func(x, y protocol.Property) int { return strings.Compare(x.Key, y.Key) })
		b = append(b, `,"properties":{`...)
		for i, p := range props {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, p.Key)
			b = append(b, ':')
			b = appendJSONString(b, p.Value)
		}
		b = append(b, '}')
	}
	if encoding != encodingBase64 && utf8.Valid(m.Body) {
		b = append(b, `,"body":`...)
		b = appendJSONString(b, unsafe.String(unsafe.SliceData(m.Body), len(m.Body)))
		b = append(b, `,"bodyEncoding":"utf8"`...)
	} else {
		b = append(b, `,"body":"`...)
		b = base64.StdEncoding.AppendEncode(b, m.Body)
		b = append(b, `","bodyEncoding":"base64"`...)
	}
	b = append(b, `,"created":"`...)
	b = m.Created.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if !m.DeliverAt.IsZero() {
		b = append(b, `,"deliverAt":"`...)
		b = m.DeliverAt.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(m.Attempts), 10)
	b = append(b, `,"brokerGroup":`...)
	b = appendJSONString(b, m.BrokerGroup)
	return append(b, '}')
}

// writePublishResponse answers res with code, encoded by hand: a publish
// answer is built for every request, and reflection cost more than the
// rest of the answer (ids and statuses need no escaping; errors do).
func writePublishResponse(w http.ResponseWriter, code int, res *PublishResponse) {
	writePublishResponseInto(w, code, res, nil)
}

// writePublishResponseInto is writePublishResponse encoding into buf's
// capacity; it returns the buffer used.
func writePublishResponseInto(w http.ResponseWriter, code int, res *PublishResponse, buf []byte) []byte {
	b := buf[:0]
	if n := 16 + len(res.Results)*56; cap(b) < n {
		b = make([]byte, 0, n)
	}
	b = append(b, `{"results":[`...)
	for i, r := range res.Results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, r.ID)
		b = append(b, `,"status":`...)
		b = appendJSONString(b, r.Status)
		if r.Error != "" {
			b = append(b, `,"error":`...)
			b = appendJSONString(b, r.Error)
		}
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	writeBody(w, code, b)
	return b
}

// writeStoredInto answers a publish whose n messages were all stored, for
// a client that asked for a minimal answer: {"stored":n}.
func writeStoredInto(w http.ResponseWriter, n int, buf []byte) []byte {
	b := append(buf[:0], `{"stored":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "}\n"...)
	w.Header()["Preference-Applied"] = hvMinimal
	writeBody(w, http.StatusOK, b)
	return b
}

// preferMinimal reports whether r asks for a minimal answer (RFC 7240's
// Prefer: return=minimal).
func preferMinimal(r *http.Request) bool {
	for _, v := range r.Header["Prefer"] {
		for v != "" {
			var p string
			p, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(p), "return=minimal") {
				return true
			}
		}
	}
	return false
}

// appendJSONString appends s as a JSON string: plain when it holds only
// printable ASCII without quotes, backslashes or HTML's <, > and & (message
// ids, status names, the usual text body; checked 8 bytes at a time),
// through encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
		if plainWord(w)|htmlWord(w) != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// htmlWord is zero when none of the 8 bytes of w is <, > or &, which
// encoding/json escapes.
func htmlWord(w uint64) uint64 {
	hasZero := func(x uint64) uint64 { return (x - ones) & ^x & highs }
	return hasZero(w^(ones*'<')) | hasZero(w^(ones*'>')) | hasZero(w^(ones*'&'))
}

// Header values the answers share (net/http only reads them; Add and Set
// replace the slice): a new one-string slice each was an allocation each.
var (
	hvJSON    = []string{"application/json"}
	hvNoStore = []string{"no-store"}
	hvMinimal = []string{"return=minimal"}
)

// writeBody answers b (JSON) with code and its Content-Length, so net/http
// writes it as is rather than in chunks.
func writeBody(w http.ResponseWriter, code int, b []byte) {
	h := w.Header()
	h["Content-Type"] = hvJSON
	h["Cache-Control"] = hvNoStore
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(code)
	w.Write(b)
}

// writeJSON answers v with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
