package ctl

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/qmq-go/qmq/metaserver/api"
)

// idOrKey checks that a lookup names exactly one of an id (the argument)
// and --key.
func idOrKey(cmd *cobra.Command, a []string, key string) (string, error) {
	switch {
	case len(a) == 1 && key == "":
		return a[0], nil
	case len(a) == 0 && key != "":
		return "", nil
	}
	return "", usageError{errors.New(cmd.CommandPath() + " takes a message id or --key KEY, not both")}
}

// inSubject is the lookup option of a --subject flag (none when empty).
func inSubject(subject string) []api.LookupOption {
	if subject == "" {
		return nil
	}
	return []api.LookupOption{api.InSubject(subject)}
}

// subjectFlagUsage documents --subject of lookup and trace.
const subjectFlagUsage = "ask only the subject's delay servers (by id every delay server is asked; by schedule key with --key, only with --subject)"

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func lookupCmd(g *globals) *cobra.Command {
	var key, subject string
	c := &cobra.Command{
		Use: "lookup (MESSAGE-ID | --key KEY)", Short: "Find where a message is stored: broker group, offset, time, headers and (with read bodies) its body",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := idOrKey(cmd, a, key)
			if err != nil {
				return err
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var l api.Lookup
			if id != "" {
				l, err = g.client().LookupID(ctx, id, inSubject(subject)...)
			} else {
				l, err = g.client().LookupKey(ctx, key, inSubject(subject)...)
			}
			if err != nil {
				return err
			}
			return g.print(l, func(w *tabwriter.Writer) {
				for i, m := range l.Messages {
					if i > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "id\t%s\nkind\t%s\nsubject\t%s\nstored as\t%s seq %d\nbroker group\t%s (offset %d)\nstored\t%s\ncreated\t%s\nattempts\t%d\n",
						m.ID, m.Kind+groupSuffix(m.Group), m.Subject, m.StoredSubject, m.Seq, m.BrokerGroup, m.Offset,
						when(&m.StoredAt), when(&m.CreatedAt), m.Attempts)
					if m.DeliverAt != nil {
						fmt.Fprintf(w, "deliver at\t%s\n", when(m.DeliverAt))
					}
					if m.ScheduleState != "" {
						fmt.Fprintf(w, "schedule\t%s\n", m.ScheduleState)
					}
					if m.LastError != "" {
						fmt.Fprintf(w, "last error\t%s (failed %s)\n", m.LastError, when(m.FailedAt))
					}
					if m.DeadWhy != "" {
						fmt.Fprintf(w, "dead because\t%s\n", m.DeadWhy)
					}
					if len(m.Tags) > 0 {
						fmt.Fprintf(w, "tags\t%s\n", strings.Join(m.Tags, ","))
					}
					for k, v := range m.Properties {
						fmt.Fprintf(w, "property\t%s=%s\n", k, v)
					}
					switch {
					case m.BodyHidden:
						fmt.Fprintf(w, "body\t(hidden: needs the read bodies right)\n")
					case m.BodyBase64:
						fmt.Fprintf(w, "body (base64)\t%s\n", m.Body)
					default:
						fmt.Fprintf(w, "body\t%s\n", m.Body)
					}
				}
				warnFailures(w, l.Errors)
			})
		},
	}
	c.Flags().StringVar(&key, "key", "", "look up by key (the qmq.key property) instead of id")
	c.Flags().StringVar(&subject, "subject", "", subjectFlagUsage)
	return c
}

func groupSuffix(group string) string {
	if group == "" {
		return ""
	}
	return " (consumer group " + group + ")"
}

func warnFailures(w *tabwriter.Writer, errs []api.BrokerFailure) {
	for _, e := range errs {
		fmt.Fprintf(w, "warning: broker group %s did not answer: %s\n", e.BrokerGroup, e.Error)
	}
}

func traceCmd(g *globals) *cobra.Command {
	var key, subject string
	c := &cobra.Command{
		Use: "trace (MESSAGE-ID | --key KEY)", Short: "Show a message's life: sent, stored, retried (with the handler's error), dead, re-driven",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := idOrKey(cmd, a, key)
			if err != nil {
				return err
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var ts []api.Trace
			if id != "" {
				var t api.Trace
				t, err = g.client().TraceID(ctx, id, inSubject(subject)...)
				ts = []api.Trace{t}
			} else {
				ts, err = g.client().TraceKey(ctx, key, inSubject(subject)...)
			}
			if err != nil {
				return err
			}
			var v any = ts
			if id != "" {
				v = ts[0]
			}
			return g.print(v, func(w *tabwriter.Writer) {
				for i, t := range ts {
					if i > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "message %s of %s\n", t.ID, t.Subject)
					fmt.Fprintln(w, "TIME\tEVENT\tGROUP\tBROKER GROUP\tATTEMPT\tDETAIL")
					for _, e := range t.Events {
						detail := e.Detail
						if e.Error != "" {
							detail = strings.TrimSpace("error: " + e.Error + "; " + detail)
						}
						if e.NextDue != nil {
							detail += "; next due " + when(e.NextDue)
						}
						attempt := "-"
						if e.Attempt > 0 {
							attempt = fmt.Sprint(e.Attempt)
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", when(&e.At), e.Event, dash(e.Group), dash(e.BrokerGroup), attempt,
							strings.TrimSuffix(dash(detail), "; "))
					}
					warnFailures(w, t.Errors)
				}
			})
		},
	}
	c.Flags().StringVar(&key, "key", "", "trace the messages with this key (the qmq.key property)")
	c.Flags().StringVar(&subject, "subject", "", subjectFlagUsage)
	return c
}
