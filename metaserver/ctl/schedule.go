package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/producer"
	"github.com/spf13/cobra"
)

// scheduleCmd inspects and changes the scheduled messages of one delay
// group: the timeline and pages of pending messages from its master's
// operations HTTP port (--delay-http; admin read), cancel and reschedule
// through its master's TCP port (--delay; the credential must be allowed to
// publish to the subject).
func scheduleCmd(g *globals) *cobra.Command {
	var delayHTTP, delayAddr, subject, from, to, cursor, key, id, at string
	var step time.Duration
	var limit int
	c := &cobra.Command{
		Use:   "schedule",
		Short: "Scheduled messages of a delay group: timeline, list, cancel, reschedule",
	}
	query := func() url.Values {
		q := url.Values{}
		q.Set("subject", subject)
		if from != "" {
			q.Set("from", from)
		}
		if to != "" {
			q.Set("to", to)
		}
		return q
	}
	timeline := &cobra.Command{
		Use:   "timeline --delay-http ADDR [--subject S] [--from T] [--to T] [--step 1m]",
		Short: "Pending messages counted per step (minutes dividing an hour, or hours) between --from and --to (RFC 3339; default the next hour)",
		Args:  args(0),
		RunE: func(*cobra.Command, []string) error {
			q := query()
			q.Set("step", step.String())
			var out struct {
				Subject string    `json:"subject"`
				From    time.Time `json:"from"`
				To      time.Time `json:"to"`
				Step    string    `json:"step"`
				Buckets []struct {
					Start time.Time `json:"start"`
					Count int64     `json:"count"`
					Bytes int64     `json:"bytes"`
				} `json:"buckets"`
			}
			if err := g.delayGet(delayHTTP, "/schedule/timeline?"+q.Encode(), &out); err != nil {
				return err
			}
			return g.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "START\tPENDING\tBYTES\t\n")
				total, most := int64(0), int64(1)
				for _, b := range out.Buckets {
					most = max(most, b.Count)
				}
				for _, b := range out.Buckets {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", b.Start.Format(time.RFC3339), b.Count, b.Bytes, strings.Repeat("#", int((b.Count*40+most-1)/most)))
					total += b.Count
				}
				fmt.Fprintf(w, "total\t%d\t\t\n", total)
			})
		},
	}
	timeline.Flags().DurationVar(&step, "step", time.Minute, "bucket width")
	list := &cobra.Command{
		Use:   "list --delay-http ADDR --subject S [--from T] [--to T] [--limit N] [--cursor C]",
		Short: "A page of pending messages (id, key, due time, size, tags; no bodies); --cursor from the last line continues",
		Args:  args(0),
		RunE: func(*cobra.Command, []string) error {
			if subject == "" {
				return usageError{errors.New("schedule list needs --subject")}
			}
			q := query()
			q.Set("limit", fmt.Sprint(limit))
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var out struct {
				Messages []struct {
					ID   string    `json:"id"`
					Key  string    `json:"key,omitempty"`
					Due  time.Time `json:"due"`
					Size int       `json:"size"`
					Tags []string  `json:"tags,omitempty"`
				} `json:"messages"`
				Next string `json:"next,omitempty"`
			}
			if err := g.delayGet(delayHTTP, "/schedule/pending?"+q.Encode(), &out); err != nil {
				return err
			}
			return g.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "DUE\tID\tKEY\tSIZE\tTAGS\n")
				for _, m := range out.Messages {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", m.Due.Format(time.RFC3339Nano), m.ID, dash(m.Key), m.Size, dash(strings.Join(m.Tags, ",")))
				}
				if out.Next != "" {
					fmt.Fprintf(w, "next page: --cursor %s\n", out.Next)
				}
			})
		},
	}
	list.Flags().IntVar(&limit, "limit", 100, "messages per page (at most 10000)")
	list.Flags().StringVar(&cursor, "cursor", "", "continue after the previous page")
	target := func() (producer.CancelTarget, error) {
		switch {
		case subject == "":
			return producer.CancelTarget{}, usageError{errors.New("--subject is required")}
		case (key == "") == (id == ""):
			return producer.CancelTarget{}, usageError{errors.New("give one of --key and --id")}
		case id != "":
			return producer.CancelTarget{Subject: subject, Key: id, ByID: true}, nil
		}
		return producer.CancelTarget{Subject: subject, Key: key}, nil
	}
	cancel := &cobra.Command{
		Use:   "cancel --delay ADDR --subject S (--key K | --id ID)",
		Short: "Cancel a pending message: prints cancelled, or fails with already fired (exit 1) or not found (exit 4)",
		Args:  args(0),
		RunE: func(*cobra.Command, []string) error {
			t, err := target()
			if err != nil {
				return err
			}
			return g.control(delayAddr, t, time.Time{}, "cancelled")
		},
	}
	reschedule := &cobra.Command{
		Use:   "reschedule --delay ADDR --subject S (--key K | --id ID) --at T",
		Short: "Move a pending message to a new due time (RFC 3339), atomically",
		Args:  args(0),
		RunE: func(*cobra.Command, []string) error {
			t, err := target()
			if err != nil {
				return err
			}
			when, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				return usageError{fmt.Errorf("--at: %w", err)}
			}
			return g.control(delayAddr, t, when, "rescheduled to "+when.UTC().Format(time.RFC3339Nano))
		},
	}
	reschedule.Flags().StringVar(&at, "at", "", "new due time, RFC 3339")
	for _, cmd := range []*cobra.Command{timeline, list} {
		cmd.Flags().StringVar(&delayHTTP, "delay-http", envOr("QMQ_DELAY_HTTP", "127.0.0.1:20811"), "the delay master's operations HTTP address (env QMQ_DELAY_HTTP)")
		cmd.Flags().StringVar(&from, "from", "", "window start, RFC 3339 (default now)")
		cmd.Flags().StringVar(&to, "to", "", "window end, RFC 3339 (default an hour after --from)")
	}
	for _, cmd := range []*cobra.Command{cancel, reschedule} {
		cmd.Flags().StringVar(&delayAddr, "delay", envOr("QMQ_DELAY", "127.0.0.1:20801"), "the delay master's address (env QMQ_DELAY)")
		cmd.Flags().StringVar(&key, "key", "", "schedule key")
		cmd.Flags().StringVar(&id, "id", "", "message id")
	}
	for _, cmd := range []*cobra.Command{timeline, list, cancel, reschedule} {
		cmd.Flags().StringVar(&subject, "subject", "", "subject")
	}
	c.AddCommand(timeline, list, cancel, reschedule)
	return c
}

// delayGet GETs path from a delay server's operations port with the
// credential and decodes the JSON answer into v.
func (g *globals) delayGet(addr, path string, v any) error {
	scheme := "http"
	client := &http.Client{Timeout: g.timeout}
	if g.tlsConfig != nil {
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: g.tlsConfig}
	}
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
	if err != nil {
		return usageError{err}
	}
	if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &api.HTTPError{Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))}
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// control cancels (at zero) or reschedules one target at a delay master.
func (g *globals) control(addr string, t producer.CancelTarget, at time.Time, done string) error {
	opts := []producer.Option{producer.WithResolver(route.NewStatic(nil, route.Groups(addr))), producer.WithSendTimeout(g.timeout)}
	if g.tlsConfig != nil {
		opts = append(opts, producer.WithTLS(g.tlsConfig))
	}
	if g.token != "" && strings.Contains(g.token, ":") {
		creds, err := auth.ParseCredentials(g.token)
		if err != nil {
			return usageError{err}
		}
		opts = append(opts, producer.WithCredentials(creds))
	}
	p, err := producer.New(opts...)
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	ctx, cancel := g.ctx()
	defer cancel()
	if at.IsZero() {
		err = p.CancelBatch(ctx, []producer.CancelTarget{t})[0]
	} else {
		err = p.RescheduleBatch(ctx, []producer.CancelTarget{t}, []time.Time{at})[0]
	}
	switch {
	case errors.Is(err, producer.ErrNotFound):
		return &api.HTTPError{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, protocol.ErrInvalid), errors.Is(err, protocol.ErrBeyondHorizon):
		return usageError{err}
	case errors.Is(err, protocol.ErrForbidden):
		return &api.HTTPError{Status: http.StatusForbidden, Message: err.Error()}
	case errors.Is(err, protocol.ErrUnauthenticated):
		return &api.HTTPError{Status: http.StatusUnauthorized, Message: err.Error()}
	case err != nil:
		return err
	}
	_, err = fmt.Fprintln(g.out, done)
	return err
}
