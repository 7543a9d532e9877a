package delay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The timeline on the operations HTTP port (admin read, like /debug/pprof;
// on a master only):
//
//	GET /schedule/timeline?subject=S&from=T&to=T&step=1m
//	    {"subject","from","to","step","buckets":[{"start","count","bytes"}]}
//	    pending counts per step (whole minutes dividing an hour, or hours);
//	    subject empty: every subject
//	GET /schedule/pending?subject=S&from=T&to=T&limit=N&cursor=C
//	    {"messages":[{"id","key","due","size","tags"}],"next":C}
//	    a page of pending messages (no bodies); next is empty on the last
//
// Times are RFC 3339; from defaults to now, to to from + 1 h. Bad input is
// answered 400 with the reason.

type timelineJSON struct {
	Subject string           `json:"subject"`
	From    time.Time        `json:"from"`
	To      time.Time        `json:"to"`
	Step    string           `json:"step"`
	Buckets []timelineBucket `json:"buckets"`
}

type timelineBucket struct {
	Start time.Time `json:"start"`
	Count int64     `json:"count"`
	Bytes int64     `json:"bytes"`
}

type pendingJSON struct {
	Messages []pendingMessage `json:"messages"`
	Next     string           `json:"next,omitempty"`
}

type pendingMessage struct {
	ID   string    `json:"id"`
	Key  string    `json:"key,omitempty"`
	Due  time.Time `json:"due"`
	Size int       `json:"size"`
	Tags []string  `json:"tags,omitempty"`
}

func (s *Server) mountSchedule(authorize func(*http.Request, bool) error) {
	if s.ops == nil {
		return
	}
	guard := func(h func(http.ResponseWriter, *http.Request, *store.Store) error) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if authorize != nil {
				if err := authorize(r, false); err != nil {
					code := http.StatusUnauthorized
					if errors.Is(err, protocol.ErrForbidden) {
						code = http.StatusForbidden
					}
					http.Error(w, http.StatusText(code), code)
					return
				}
			}
			m, _ := s.current()
			if m == nil {
				http.Error(w, "delay group "+s.opts.Group+": this server is not the master", http.StatusServiceUnavailable)
				return
			}
			if err := h(w, r, m.store); err != nil {
				code := http.StatusInternalServerError
				if st := protocol.StatusOf(err); st == protocol.StatusInvalid || st == protocol.StatusBadRequest {
					code = http.StatusBadRequest
				}
				http.Error(w, err.Error(), code)
			}
		})
	}
	s.ops.Handle("/schedule/timeline", guard(s.serveTimeline))
	s.ops.Handle("/schedule/pending", guard(s.servePending))
}

func window(r *http.Request, now time.Time) (from, to time.Time, err error) {
	q := r.URL.Query()
	from, to = now, time.Time{}
	if v := q.Get("from"); v != "" {
		if from, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return from, to, protocol.Errorf(protocol.StatusBadRequest, "from: "+err.Error())
		}
	}
	to = from.Add(time.Hour)
	if v := q.Get("to"); v != "" {
		if to, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return from, to, protocol.Errorf(protocol.StatusBadRequest, "to: "+err.Error())
		}
	}
	return from, to, nil
}

func (s *Server) serveTimeline(w http.ResponseWriter, r *http.Request, st *store.Store) error {
	from, to, err := window(r, s.clk.Now())
	if err != nil {
		return err
	}
	step := time.Minute
	if v := r.URL.Query().Get("step"); v != "" {
		if step, err = time.ParseDuration(v); err != nil {
			return protocol.Errorf(protocol.StatusBadRequest, "step: "+err.Error())
		}
	}
	subject := r.URL.Query().Get("subject")
	buckets, err := st.Timeline(subject, from, to, step)
	if err != nil {
		return err
	}
	out := timelineJSON{Subject: subject, From: from.UTC(), To: to.UTC(), Step: step.String(), Buckets: make([]timelineBucket, len(buckets))}
	for i, b := range buckets {
		out.Buckets[i] = timelineBucket(b)
	}
	return writeJSON(w, out)
}

func (s *Server) servePending(w http.ResponseWriter, r *http.Request, st *store.Store) error {
	from, to, err := window(r, s.clk.Now())
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 1000
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil {
			return protocol.Errorf(protocol.StatusBadRequest, "limit: "+err.Error())
		}
	}
	var cur store.Cursor
	if v := q.Get("cursor"); v != "" {
		h, off, ok := strings.Cut(v, ":")
		var e1, e2 error
		cur.Hour, e1 = strconv.ParseInt(h, 10, 64)
		cur.Offset, e2 = strconv.ParseInt(off, 10, 64)
		if !ok || e1 != nil || e2 != nil {
			return protocol.Errorf(protocol.StatusBadRequest, fmt.Sprintf("cursor %q: want HOUR:OFFSET from a previous page", v))
		}
	}
	page, next, more, err := st.Pending(q.Get("subject"), from, to, cur, limit)
	if err != nil {
		return err
	}
	out := pendingJSON{Messages: make([]pendingMessage, len(page))}
	for i, m := range page {
		out.Messages[i] = pendingMessage{ID: m.ID, Key: m.Key, Due: m.Due, Size: m.Size, Tags: m.Tags}
	}
	if more {
		out.Next = fmt.Sprintf("%d:%d", next.Hour, next.Offset)
	}
	return writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}
