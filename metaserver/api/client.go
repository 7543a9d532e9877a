package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Errors a Client returns; match with errors.Is. Every failure the server
// answered is an *HTTPError that matches the sentinel of its status.
var (
	// ErrUnauthorized: the credential is missing or wrong (HTTP 401).
	ErrUnauthorized = &HTTPError{Status: http.StatusUnauthorized}
	// ErrForbidden: the credential's identity lacks the right (HTTP 403).
	ErrForbidden = &HTTPError{Status: http.StatusForbidden}
	// ErrNotFound: the subject, group or dead letter does not exist (404).
	ErrNotFound = &HTTPError{Status: http.StatusNotFound}
	// ErrConflict: the change breaks a rule (409).
	ErrConflict = &HTTPError{Status: http.StatusConflict}
	// ErrBadRequest: the request's input is invalid (400).
	ErrBadRequest = &HTTPError{Status: http.StatusBadRequest}
	// ErrNotHTTP: the address closed the connection or answered something
	// other than HTTP, as a meta server's TCP port (the one clients and
	// brokers use) does: the admin API is on its HTTP port.
	ErrNotHTTP = errors.New("api: the address does not answer HTTP (a meta server's TCP address? the admin API is on its HTTP port)")
)

// HTTPError is a non-2xx answer of the admin API.
type HTTPError struct {
	Status  int
	Message string
}

// Error returns "HTTP <status>: <message>".
func (e *HTTPError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// Is matches any *HTTPError with the same status.
func (e *HTTPError) Is(target error) bool {
	t, ok := target.(*HTTPError)
	return ok && t.Status == e.Status
}

// Client calls a meta server's admin API.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// NewClient returns a client of the meta server at base ("host:port" or
// "http://host:port"). token, when not empty, is sent with every request as
// "Authorization: Bearer <token>": "name:secret" for an identity, or the
// bare admin token (identity admin).
func NewClient(base, token string, timeout time.Duration) *Client {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: timeout}}
}

// WithTLS makes c talk HTTPS with cfg (a base given without a scheme
// becomes https://).
func (c *Client) WithTLS(cfg *tls.Config) *Client {
	if rest, ok := strings.CutPrefix(c.base, "http://"); ok {
		c.base = "https://" + rest
	}
	c.http.Transport = &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}
	return c
}

// Do sends method path (under /api/v1) with in as the JSON body (nil: none)
// and decodes the answer into out (nil: discard).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, c.http, method, path, in, out)
}

func (c *Client) do(ctx context.Context, hc *http.Client, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/api/v1"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if notHTTP(err) {
			return fmt.Errorf("%w: %s: %v", ErrNotHTTP, c.base, err)
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &HTTPError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("api: decode %s %s: %w", method, path, err)
	}
	return nil
}

// notHTTP reports whether err means the peer does not speak HTTP: it
// closed the connection without an answer (a meta server's TCP port reads
// the request as a frame too large and hangs up) or answered bytes that are
// no HTTP response.
func notHTTP(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "malformed HTTP response") ||
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") ||
		strings.Contains(err.Error(), "first record does not look like a TLS handshake")
}

func esc(s string) string { return url.PathEscape(s) }

// Status returns the cluster overview.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.Do(ctx, http.MethodGet, "/status", nil, &s)
}

// Brokers lists registered brokers.
func (c *Client) Brokers(ctx context.Context) ([]Broker, error) {
	var b []Broker
	return b, c.Do(ctx, http.MethodGet, "/brokers", nil, &b)
}

// Groups lists broker groups.
func (c *Client) Groups(ctx context.Context) ([]Group, error) {
	var g []Group
	return g, c.Do(ctx, http.MethodGet, "/groups", nil, &g)
}

// Routes lists every subject's route.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	var r []Route
	return r, c.Do(ctx, http.MethodGet, "/routes", nil, &r)
}

// Route returns one subject's route.
func (c *Client) Route(ctx context.Context, subject string) (Route, error) {
	var r Route
	return r, c.Do(ctx, http.MethodGet, "/routes/"+esc(subject), nil, &r)
}

// SubjectRoutes returns every route of subject: its realtime route and, once
// a delayed message was sent to it, its delay route (ErrNotFound: none).
func (c *Client) SubjectRoutes(ctx context.Context, subject string) ([]Route, error) {
	var r []Route
	return r, c.Do(ctx, http.MethodGet, "/routes?subject="+url.QueryEscape(subject), nil, &r)
}

// AddRouteGroup adds a broker group to a subject's route (creating the
// route when the subject has none).
func (c *Client) AddRouteGroup(ctx context.Context, subject, group string) (Route, error) {
	var r Route
	return r, c.Do(ctx, http.MethodPost, "/routes/"+esc(subject)+"/groups", GroupRequest{Group: group}, &r)
}

// RemoveRouteGroup removes a broker group from a subject's route.
func (c *Client) RemoveRouteGroup(ctx context.Context, subject, group string) (Route, error) {
	var r Route
	return r, c.Do(ctx, http.MethodDelete, "/routes/"+esc(subject)+"/groups/"+esc(group), nil, &r)
}

// MarkReadonly marks a group readonly for subject ("" = every subject).
func (c *Client) MarkReadonly(ctx context.Context, group, subject string) (Group, error) {
	var g Group
	return g, c.Do(ctx, http.MethodPost, "/groups/"+esc(group)+"/readonly", ReadonlyRequest{Subject: subject}, &g)
}

// UnmarkReadonly removes a readonly mark.
func (c *Client) UnmarkReadonly(ctx context.Context, group, subject string) (Group, error) {
	var g Group
	q := ""
	if subject != "" {
		q = "?subject=" + url.QueryEscape(subject)
	}
	return g, c.Do(ctx, http.MethodDelete, "/groups/"+esc(group)+"/readonly"+q, nil, &g)
}

// Subject returns a subject's routes, messages, in-rate and consumer groups
// with their consumers (ErrNotFound: no route and no consumers).
func (c *Client) Subject(ctx context.Context, subject string) (Subject, error) {
	var r Subject
	return r, c.Do(ctx, http.MethodGet, "/subjects/"+esc(subject), nil, &r)
}

// Consumers lists consumer groups with consumers and backlog; subject ""
// lists every subject's.
func (c *Client) Consumers(ctx context.Context, subject string) ([]ConsumerGroup, error) {
	var g []ConsumerGroup
	q := ""
	if subject != "" {
		q = "?subject=" + url.QueryEscape(subject)
	}
	return g, c.Do(ctx, http.MethodGet, "/consumers"+q, nil, &g)
}

// ResetOffset moves a consumer group's cursor: to is "earliest", "latest"
// or an RFC 3339 time.
func (c *Client) ResetOffset(ctx context.Context, subject, group, to string) (ActionResult, error) {
	return c.Reset(ctx, subject, group, ResetRequest{To: to})
}

// Reset resets a consumer group's offset as req says (req.Create creates a
// group that does not exist; without it such a group is ErrNotFound).
func (c *Client) Reset(ctx context.Context, subject, group string, req ResetRequest) (ActionResult, error) {
	var r ActionResult
	return r, c.Do(ctx, http.MethodPost, "/consumers/"+esc(subject)+"/"+esc(group)+"/reset", req, &r)
}

// SetConsumerOnline takes a consumer offline (online false) or back online.
func (c *Client) SetConsumerOnline(ctx context.Context, subject, group, id string, online bool) (ActionResult, error) {
	var r ActionResult
	op := "offline"
	if online {
		op = "online"
	}
	return r, c.Do(ctx, http.MethodPost, "/consumers/"+esc(subject)+"/"+esc(group)+"/"+esc(id)+"/"+op, nil, &r)
}

// DeadLetters lists a group's dead letters with a sequence above after.
func (c *Client) DeadLetters(ctx context.Context, subject, group string, after uint64, max int) (DeadLetters, error) {
	var d DeadLetters
	q := "?after=" + strconv.FormatUint(after, 10) + "&max=" + strconv.Itoa(max)
	return d, c.Do(ctx, http.MethodGet, "/deadletters/"+esc(subject)+"/"+esc(group)+q, nil, &d)
}

// InspectDeadLetter returns the dead letter with message id.
func (c *Client) InspectDeadLetter(ctx context.Context, subject, group, id string) (DeadLetters, error) {
	var d DeadLetters
	return d, c.Do(ctx, http.MethodGet, "/deadletters/"+esc(subject)+"/"+esc(group)+"/"+esc(id), nil, &d)
}

// RedriveDeadLetters sends dead letters (all when ids is empty) back to the
// group.
func (c *Client) RedriveDeadLetters(ctx context.Context, subject, group string, ids []string) (DeadLetters, error) {
	var d DeadLetters
	return d, c.Do(ctx, http.MethodPost, "/deadletters/"+esc(subject)+"/"+esc(group)+"/redrive", DeadLetterAction{IDs: ids}, &d)
}

// PurgeDeadLetters drops dead letters (all when ids is empty).
func (c *Client) PurgeDeadLetters(ctx context.Context, subject, group string, ids []string) (DeadLetters, error) {
	var d DeadLetters
	return d, c.Do(ctx, http.MethodPost, "/deadletters/"+esc(subject)+"/"+esc(group)+"/purge", DeadLetterAction{IDs: ids}, &d)
}

// DefaultSwitchoverTimeout is how long a switchover may take when the
// request names no timeout.
const DefaultSwitchoverTimeout = 30 * time.Second

// Switchover hands group from its master to its slave and returns the old
// and the new master once the new one holds the group. timeout bounds the
// switchover on the meta server (0: DefaultSwitchoverTimeout); the request
// waits that long plus a margin, whatever the Client's own timeout.
func (c *Client) Switchover(ctx context.Context, group string, timeout time.Duration) (Switchover, error) {
	var r Switchover
	wait := timeout
	if wait <= 0 {
		wait = DefaultSwitchoverTimeout
	}
	hc := *c.http
	hc.Timeout = max(hc.Timeout, wait+10*time.Second)
	return r, c.do(ctx, &hc, http.MethodPost, "/groups/"+esc(group)+"/switchover", SwitchoverRequest{TimeoutMillis: timeout.Milliseconds()}, &r)
}

// IsUnauthorized reports whether err is a 401 answer.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err is a 409 answer.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsBadRequest reports whether err is a 400 answer.
func IsBadRequest(err error) bool { return errors.Is(err, ErrBadRequest) }

// IsForbidden reports whether err is a 403 answer.
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) }

// ForceFailover lets group's slave take the group although it is not its
// eligible slave (an unclean failover: what the gone master acknowledged
// and the slave never copied is lost). Refused (409) while the group has a
// live master or no slave.
func (c *Client) ForceFailover(ctx context.Context, group string) (ForcedFailover, error) {
	var r ForcedFailover
	return r, c.Do(ctx, http.MethodPost, "/groups/"+esc(group)+"/failover", ForceFailoverRequest{Force: true}, &r)
}
