package ctl

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK           = 0
	ExitFailed       = 1
	ExitUsage        = 2
	ExitUnauthorized = 3
	ExitNotFound     = 4
)

// usageError marks errors in the command line itself.
type usageError struct{ error }

// Main runs qmqctl with args and returns its exit code. Output goes to
// stdout, errors to stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewCommand(stdout)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "qmqctl:", err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, api.ErrUnauthorized):
		fmt.Fprintln(stderr, "qmqctl: pass a credential (name:secret, or the admin token) in a file only you can read with --token-file FILE, or in "+EnvToken)
		return ExitUnauthorized
	case errors.Is(err, api.ErrForbidden):
		fmt.Fprintln(stderr, "qmqctl: the credential's identity lacks the right (see qmqctl whoami)")
		return ExitUnauthorized
	case errors.Is(err, api.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, api.ErrBadRequest):
		return ExitUsage
	case errors.Is(err, api.ErrNotHTTP):
		fmt.Fprintln(stderr, "qmqctl: --meta-http takes the meta server's HTTP address ("+EnvMetaHTTP+", run-local's "+
			DefaultMetaHTTP+"), not the TCP address clients use ("+EnvMeta+", run-local's 127.0.0.1:20880)")
		return ExitUsage
	}
	if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") ||
		strings.Contains(err.Error(), "accepts") || strings.Contains(err.Error(), "requires") {
		return ExitUsage
	}
	return ExitFailed
}

// The meta server's HTTP admin address: --meta-http, else $QMQ_META_HTTP,
// else run-local's. $QMQ_META is the meta server's TCP address (clients,
// brokers, scripts/example): qmqctl does not read it, and names it when it
// is given one by mistake.
const (
	EnvMetaHTTP     = "QMQ_META_HTTP"
	EnvMeta         = "QMQ_META"
	DefaultMetaHTTP = "127.0.0.1:20980"
)

// EnvToken is the environment variable qmqctl reads its credential from
// when --token-file is not given.
const EnvToken = "QMQ_TOKEN"

type globals struct {
	meta      string
	tokenFile string
	token     string // read by loadToken before a command runs
	json      bool
	timeout   time.Duration
	tls       tlsconfig.Files
	tlsConfig *tls.Config // built from tls before a command runs (nil: plain HTTP)
	out       io.Writer
}

func (g *globals) client() *api.Client {
	c := api.NewClient(g.meta, g.token, g.timeout)
	if g.tlsConfig != nil {
		c.WithTLS(g.tlsConfig)
	}
	return c
}

// loadTLS builds the HTTPS client config from --tls-ca, --tls-cert and
// --tls-key (a client certificate is an identity too).
func (g *globals) loadTLS() error {
	if g.tls.IsZero() {
		return nil
	}
	host := g.meta
	if _, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	cfg, err := tlsconfig.Client(g.tls, host)
	if err != nil {
		return usageError{fmt.Errorf("tls: %w", err)}
	}
	g.tlsConfig = cfg
	return nil
}

// loadToken reads the credential: from --token-file (a file only its
// owner may read), else from QMQ_TOKEN. It is never a flag's value, so it
// shows neither in ps nor in --help.
func (g *globals) loadToken() error {
	if g.tokenFile != "" {
		tok, err := auth.ReadSecretFile(g.tokenFile)
		if err != nil {
			return usageError{fmt.Errorf("--token-file: %w", err)}
		}
		g.token = tok
		return nil
	}
	g.token = strings.TrimSpace(os.Getenv(EnvToken))
	return nil
}

func (g *globals) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.timeout)
}

// print writes v as JSON with --json, else calls table.
func (g *globals) print(v any, table func(w *tabwriter.Writer)) error {
	if g.json {
		enc := json.NewEncoder(g.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// NewCommand returns qmqctl's root command writing results to out.
func NewCommand(out io.Writer) *cobra.Command {
	g := &globals{out: out}
	root := &cobra.Command{
		Use:   "qmqctl",
		Short: "Administer a QMQ-Go cluster through a meta server's admin API",
		Long: "qmqctl talks to a meta server's HTTP admin API. Changes need an identity with admin\n" +
			"write; reads need admin read when the meta server runs with --auth. The credential\n" +
			"(name:secret, or the admin token alone) comes from a file only you can read\n" +
			"(--token-file) or from " + EnvToken + ", never from the command line. Output is a table,\n" +
			"or JSON with --json.\n" +
			"Exit codes: 0 ok, 1 failed, 2 usage, 3 unauthorized or forbidden, 4 not found.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("meta") {
				fmt.Fprintln(cmd.ErrOrStderr(), "qmqctl: --meta is now --meta-http (the meta server's HTTP address; "+
					EnvMeta+" and clients' --meta name its TCP one)")
			}
			if g.token != "" {
				return usageError{errors.New("--token is gone (a secret on the command line shows in ps): use --token-file FILE or " + EnvToken)}
			}
			if err := g.loadTLS(); err != nil {
				return err
			}
			return g.loadToken()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.meta, "meta-http", envOr(EnvMetaHTTP, DefaultMetaHTTP), "meta server's HTTP admin address, host:port or URL (env "+EnvMetaHTTP+")")
	pf.StringVar(&g.meta, "meta", envOr(EnvMetaHTTP, DefaultMetaHTTP), "old name of --meta-http")
	_ = pf.MarkHidden("meta")
	pf.StringVar(&g.tokenFile, "token-file", "", "file holding the credential, name:secret or the admin token, mode 0600 (default: env "+EnvToken+")")
	pf.StringVar(&g.token, "token", "", "removed: use --token-file or "+EnvToken)
	_ = pf.MarkHidden("token")
	pf.StringVar(&g.tls.CA, "tls-ca", "", "PEM file of the CA that signed the meta server's certificate: talk HTTPS")
	pf.StringVar(&g.tls.Cert, "tls-cert", "", "PEM client certificate (an identity: qmq://admin/NAME) for HTTPS")
	pf.StringVar(&g.tls.Key, "tls-key", "", "PEM private key of --tls-cert, mode 0600")
	pf.BoolVar(&g.json, "json", false, "print JSON instead of tables")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "request timeout")

	root.AddCommand(failoverCmd(g))
	root.AddCommand(statusCmd(g), brokersCmd(g), groupsCmd(g), routesCmd(g), routeCmd(g), readonlyCmd(g),
		switchoverCmd(g), consumersCmd(g), offsetCmd(g), consumerCmd(g), deadCmd(g),
		whoamiCmd(g), identityCmd(g), grantCmd(g), revokeCmd(g))
	root.AddCommand(lookupCmd(g), traceCmd(g))
	root.AddCommand(scheduleCmd(g))
	return root
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func args(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if len(a) != n {
			return usageError{fmt.Errorf("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), n, cmd.Use, len(a))}
		}
		return nil
	}
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "Cluster overview", Args: args(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			st, err := g.client().Status(ctx)
			if err != nil {
				return err
			}
			return g.print(st, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "revision\t%d\n", st.Revision)
				fmt.Fprintf(w, "prefix\t%s\n", st.Prefix)
				fmt.Fprintf(w, "meta servers\t%d\n", len(st.MetaServers))
				for _, m := range st.MetaServers {
					fmt.Fprintf(w, "  %s\thttp %s, up since %s\n", m.TCP, m.HTTP, m.StartedAt.Format(time.RFC3339))
				}
				fmt.Fprintf(w, "brokers\t%d\n", st.Brokers)
				fmt.Fprintf(w, "groups\t%d (rw %d, readonly %d, unavailable %d)\n", st.Groups.Total, st.Groups.ReadWrite, st.Groups.Readonly, st.Groups.Unavailable)
				fmt.Fprintf(w, "replication\t%d groups with a slave, %d without; largest lag %s\n", st.Replication.WithSlave,
					st.Replication.WithoutSlave, lag(st.Replication.MaxLag.Bytes, st.Replication.MaxLag.Millis))
				fmt.Fprintf(w, "subjects\t%d\n", st.Subjects)
				fmt.Fprintf(w, "consumers\t%d\n", st.Consumers)
				fmt.Fprintf(w, "throughput\tin %d msg/s, out %d msg/s\n", st.InPerSec, st.OutPerSec)
			})
		},
	}
}

func brokersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "brokers", Short: "List registered brokers", Args: args(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			bs, err := g.client().Brokers(ctx)
			if err != nil {
				return err
			}
			return g.print(bs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "GROUP\tROLE\tKIND\tSTATE\tEPOCH\tADDRESS\tBROKER ID\tREPLICA LAG\tIN/S\tOUT/S\tREGISTERED")
				for _, b := range bs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", b.Group, b.Role, b.Kind, b.State, epoch(b.Epoch), b.Address, b.BrokerID,
						lag(b.Load.ReplicaLagBytes, b.Load.ReplicaLagMillis), b.Load.InPerSec, b.Load.OutPerSec, b.RegisteredAt.Format(time.RFC3339))
				}
			})
		},
	}
}

func groupsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "groups", Short: "List broker groups and their state", Args: args(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			gs, err := g.client().Groups(ctx)
			if err != nil {
				return err
			}
			return g.print(gs, func(w *tabwriter.Writer) { groupTable(w, gs) })
		},
	}
}

func groupTable(w *tabwriter.Writer, gs []api.Group) {
	fmt.Fprintln(w, "GROUP\tKIND\tSTATE\tWRITES\tEPOCH\tMASTER\tSLAVE\tELIGIBLE\tREPLICA LAG\tROUTES\tIN/S\tOUT/S\tPENDING\tREADONLY FOR")
	for _, x := range gs {
		pending := "-"
		if x.Kind == "delay" {
			pending = fmt.Sprint(x.Load.Pending)
		}
		replica := "-"
		if x.Lag != nil {
			replica = lag(x.Lag.Bytes, x.Lag.Millis)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", x.Name, dash(x.Kind), x.State, dash(x.WriteState),
			epoch(x.Epoch), seatName(x.MasterID, x.Master), slaveName(x), eligibleName(x), replica, x.Routes, x.Load.InPerSec,
			x.Load.OutPerSec, pending, dash(strings.Join(x.Readonly, ",")))
	}
}

// seatName is "id@address" ("address" when the id is the address), or "-"
// for an empty seat.
func seatName(id, addr string) string {
	switch {
	case addr == "":
		return "-"
	case id == "" || id == addr:
		return addr
	}
	return id + "@" + addr
}

// slaveName is the slave's seat, with the epoch it copies when that is not
// the master's (a slave still on an older election).
func slaveName(x api.Group) string {
	s := seatName(x.SlaveID, x.Slave)
	if x.Slave != "" && x.SlaveEpoch != x.Epoch {
		s += fmt.Sprintf(" (epoch %s)", epoch(x.SlaveEpoch))
	}
	return s
}

// eligibleName is the group's eligible slave ("-" none), with its set's
// mode (sync: it takes over without waiting for the master's lease) and
// "released" when the master left the group to it.
func eligibleName(x api.Group) string {
	if x.Eligible == "" {
		return "-"
	}
	s := x.Eligible
	if x.Sync {
		s += " (sync)"
	}
	if x.Released {
		s += " released"
	}
	return s
}

// epoch prints an epoch, "-" for none.
func epoch(e uint64) string {
	if e == 0 {
		return "-"
	}
	return strconv.FormatUint(e, 10)
}

// lag prints a replication lag as "12.0KiB 350ms".
func lag(bytes, millis uint64) string {
	return byteSize(bytes) + " " + (time.Duration(millis) * time.Millisecond).String()
}

// byteSize prints n bytes with a binary unit.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func routeTable(w *tabwriter.Writer, rs []api.Route) {
	fmt.Fprintln(w, "SUBJECT\tKIND\tGROUP\tSTATE\tMASTER\tEPOCH")
	for _, r := range rs {
		for _, x := range r.Groups {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Subject, r.Kind, x.Group, x.State, dash(x.Master), epoch(x.Epoch))
		}
	}
}

func routesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "routes [SUBJECT]", Short: "List subjects and their routes", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var rs []api.Route
			var err error
			if len(a) == 1 {
				rs, err = g.client().SubjectRoutes(ctx, a[0]) // realtime and delay
			} else {
				rs, err = g.client().Routes(ctx)
			}
			if err != nil {
				return err
			}
			return g.print(rs, func(w *tabwriter.Writer) { routeTable(w, rs) })
		},
	}
}

func routeCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "route", Short: "Add or remove a broker group on a subject's route"}
	c.AddCommand(&cobra.Command{
		Use: "add SUBJECT GROUP", Short: "Add a broker group to a subject's route", Args: args(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			r, err := g.client().AddRouteGroup(ctx, a[0], a[1])
			if err != nil {
				return err
			}
			return g.print(r, func(w *tabwriter.Writer) { routeTable(w, []api.Route{r}) })
		},
	}, &cobra.Command{
		Use: "remove SUBJECT GROUP", Short: "Remove a broker group from a subject's route (never the last)", Args: args(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			r, err := g.client().RemoveRouteGroup(ctx, a[0], a[1])
			if err != nil {
				return err
			}
			return g.print(r, func(w *tabwriter.Writer) { routeTable(w, []api.Route{r}) })
		},
	})
	return c
}

func readonlyCmd(g *globals) *cobra.Command {
	var subject string
	c := &cobra.Command{Use: "readonly", Short: "Mark or unmark a broker group readonly (producers stop sending to it)"}
	mark := &cobra.Command{
		Use: "mark GROUP", Short: "Mark a group readonly for --subject (default: every subject)", Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			x, err := g.client().MarkReadonly(ctx, a[0], subject)
			if err != nil {
				return err
			}
			return g.print(x, func(w *tabwriter.Writer) { groupTable(w, []api.Group{x}) })
		},
	}
	unmark := &cobra.Command{
		Use: "unmark GROUP", Short: "Remove a readonly mark for --subject (default: the every-subject mark)", Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			x, err := g.client().UnmarkReadonly(ctx, a[0], subject)
			if err != nil {
				return err
			}
			return g.print(x, func(w *tabwriter.Writer) { groupTable(w, []api.Group{x}) })
		},
	}
	for _, sc := range []*cobra.Command{mark, unmark} {
		sc.Flags().StringVar(&subject, "subject", "", "only this subject (default: every subject, *)")
	}
	c.AddCommand(mark, unmark)
	return c
}

func switchoverCmd(g *globals) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "switchover GROUP",
		Short: "Hand a broker group from its master to its slave (a planned switchover)",
		Long: "switchover asks the group's master, through the meta server, to stop writes, wait until its\n" +
			"slave holds everything it committed, and step down; the slave becomes the master at a new\n" +
			"epoch and the old master rejoins as its slave. It returns once the new master holds the\n" +
			"group, or fails (and the group keeps its master) when the group has no slave, the master\n" +
			"refuses, or nothing changed within --wait.",
		Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if wait < time.Second {
				return usageError{fmt.Errorf("--wait %v: must be at least 1s", wait)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
			defer cancel()
			r, err := g.client().Switchover(ctx, a[0], wait)
			if err != nil {
				return err
			}
			return g.print(r, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "group\t%s\n", r.Group)
				fmt.Fprintf(w, "old master\t%s at epoch %d\n", seatName(r.From.BrokerID, r.From.Address), r.From.Epoch)
				fmt.Fprintf(w, "new master\t%s at epoch %d\n", seatName(r.To.BrokerID, r.To.Address), r.To.Epoch)
				fmt.Fprintf(w, "took\t%v\n", time.Duration(r.TookMillis)*time.Millisecond)
			})
		},
	}
	c.Flags().DurationVar(&wait, "wait", api.DefaultSwitchoverTimeout, "how long the switchover may take")
	return c
}

func consumersCmd(g *globals) *cobra.Command {
	var subject string
	c := &cobra.Command{
		Use: "consumers", Short: "List consumer groups with their consumers and backlog", Args: args(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			cgs, err := g.client().Consumers(ctx, subject)
			if err != nil {
				return err
			}
			return g.print(cgs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SUBJECT\tGROUP\tBACKLOG\tRETRYING\tDEAD\tCONSUMERS\tOFFLINE\tBROKER GROUPS")
				for _, x := range cgs {
					var ids, off, per []string
					for _, c := range x.Consumers {
						ids = append(ids, c.ClientID)
						if !c.Online {
							off = append(off, c.ClientID)
						}
					}
					for _, p := range x.PerBroker {
						per = append(per, p.BrokerGroup+"="+strconv.FormatUint(p.Backlog, 10))
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", x.Subject, x.Group, x.Backlog, x.RetryBacklog, x.DeadLetters, dash(strings.Join(ids, ",")),
						dash(strings.Join(off, ",")), dash(strings.Join(per, " ")))
				}
				if len(cgs) > 0 {
					for _, e := range cgs[0].Errors {
						fmt.Fprintf(w, "warning: broker group %s did not answer: %s\n", e.BrokerGroup, e.Error)
					}
				}
			})
		},
	}
	c.Flags().StringVar(&subject, "subject", "", "only this subject")
	return c
}

func printAction(g *globals, r api.ActionResult) error {
	return g.print(r, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "done on\t%s\n", dash(strings.Join(r.OK, ",")))
		for _, e := range r.Errors {
			fmt.Fprintf(w, "failed on\t%s: %s\n", e.BrokerGroup, e.Error)
		}
	})
}

func offsetCmd(g *globals) *cobra.Command {
	var to string
	var create bool
	c := &cobra.Command{Use: "offset", Short: "Consumer group offsets"}
	reset := &cobra.Command{
		Use: "reset SUBJECT GROUP --to earliest|latest|RFC3339-TIME", Short: "Move a consumer group's position", Args: args(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			if to == "" {
				return usageError{errors.New("--to is required: earliest, latest or an RFC 3339 time")}
			}
			ctx, cancel := g.ctx()
			defer cancel()
			r, err := g.client().Reset(ctx, a[0], a[1], api.ResetRequest{To: to, Create: create})
			if err != nil {
				return err
			}
			return printAction(g, r)
		},
	}
	reset.Flags().StringVar(&to, "to", "", "earliest, latest, or an RFC 3339 time such as 2026-01-02T15:04:05Z")
	reset.Flags().BoolVar(&create, "create", false, "create the consumer group at that position if it does not exist (without it: not found, exit 4)")
	c.AddCommand(reset)
	return c
}

func consumerCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "consumer", Short: "Take a consumer offline or bring it back online"}
	for _, online := range []bool{false, true} {
		name := "offline"
		if online {
			name = "online"
		}
		c.AddCommand(&cobra.Command{
			Use: name + " SUBJECT GROUP CONSUMER-ID", Short: "Take a consumer " + name, Args: args(3),
			RunE: func(cmd *cobra.Command, a []string) error {
				ctx, cancel := g.ctx()
				defer cancel()
				r, err := g.client().SetConsumerOnline(ctx, a[0], a[1], a[2], online)
				if err != nil {
					return err
				}
				return printAction(g, r)
			},
		})
	}
	return c
}

func deadTable(w *tabwriter.Writer, d api.DeadLetters) {
	fmt.Fprintf(w, "%s/%s: %d dead letters", d.Subject, d.Group, d.Total)
	if d.Affected > 0 {
		fmt.Fprintf(w, ", %d affected", d.Affected)
	}
	fmt.Fprintln(w)
	if len(d.Letters) > 0 {
		fmt.Fprintln(w, "BROKER GROUP\tSEQ\tID\tATTEMPTS\tCREATED\tDIED\tLAST ERROR\tSIZE\tBODY")
		for _, l := range d.Letters {
			body := l.Body
			if l.BodyBase64 {
				body = "base64:" + body
			}
			if len(body) > 60 {
				body = body[:60] + "…"
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%d\t%q\n", l.BrokerGroup, l.Seq, l.ID, l.Attempts, l.CreatedAt.Format(time.RFC3339),
				diedAt(l), dash(shorten(l.LastError, 60)), l.Size, body)
		}
	}
	for _, e := range d.Errors {
		fmt.Fprintf(w, "warning: broker group %s did not answer: %s\n", e.BrokerGroup, e.Error)
	}
}

func deadCmd(g *globals) *cobra.Command {
	var after uint64
	var max int
	var ids []string
	var all bool
	c := &cobra.Command{Use: "dead", Aliases: []string{"deadletters"}, Short: "List, inspect, re-drive and purge dead letters"}
	list := &cobra.Command{
		Use: "list SUBJECT GROUP", Short: "List a consumer group's dead letters", Args: args(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			d, err := g.client().DeadLetters(ctx, a[0], a[1], after, max)
			if err != nil {
				return err
			}
			return g.print(d, func(w *tabwriter.Writer) { deadTable(w, d) })
		},
	}
	list.Flags().Uint64Var(&after, "after", 0, "only sequences above this (paging)")
	list.Flags().IntVar(&max, "max", 100, "at most this many per broker group")
	inspect := &cobra.Command{
		Use: "inspect SUBJECT GROUP MESSAGE-ID", Short: "Show one dead letter in full", Args: args(3),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			d, err := g.client().InspectDeadLetter(ctx, a[0], a[1], a[2])
			if err != nil {
				return err
			}
			return g.print(d, func(w *tabwriter.Writer) {
				for _, l := range d.Letters {
					fmt.Fprintf(w, "broker group\t%s\nseq\t%d\nid\t%s\nsubject\t%s\nattempts\t%d\ncreated\t%s\ntags\t%s\n",
						l.BrokerGroup, l.Seq, l.ID, l.Subject, l.Attempts, l.CreatedAt.Format(time.RFC3339), dash(strings.Join(l.Tags, ",")))
					fmt.Fprintf(w, "died\t%s\nwhy\t%s\nlast error\t%s\n", diedAt(l), dash(l.DeadWhy), dash(l.LastError))
					for k, v := range l.Properties {
						fmt.Fprintf(w, "property\t%s=%s\n", k, v)
					}
					if l.BodyBase64 {
						fmt.Fprintf(w, "body (base64)\t%s\n", l.Body)
					} else {
						fmt.Fprintf(w, "body\t%s\n", l.Body)
					}
				}
			})
		},
	}
	mk := func(name, short string, do func(c *api.Client, ctx context.Context, subject, group string, ids []string) (api.DeadLetters, error)) *cobra.Command {
		cmd := &cobra.Command{
			Use: name + " SUBJECT GROUP (--id ID... | --all)", Short: short, Args: args(2),
			RunE: func(cmd *cobra.Command, a []string) error {
				if len(ids) == 0 && !all {
					return usageError{errors.New("name dead letters with --id, or pass --all")}
				}
				if len(ids) > 0 && all {
					return usageError{errors.New("--id and --all exclude each other")}
				}
				ctx, cancel := g.ctx()
				defer cancel()
				d, err := do(g.client(), ctx, a[0], a[1], ids)
				if err != nil {
					return err
				}
				return g.print(d, func(w *tabwriter.Writer) { deadTable(w, d) })
			},
		}
		cmd.Flags().StringSliceVar(&ids, "id", nil, "message id (repeat or comma-separate)")
		cmd.Flags().BoolVar(&all, "all", false, "every dead letter of the group")
		return cmd
	}
	c.AddCommand(list, inspect,
		mk("redrive", "Send dead letters back to their consumer group", (*api.Client).RedriveDeadLetters),
		mk("purge", "Drop dead letters", (*api.Client).PurgeDeadLetters))
	return c
}
