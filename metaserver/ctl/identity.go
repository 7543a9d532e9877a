package ctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/spf13/cobra"
)

// Identity commands: who may connect and what each may do (package api,
// /identities). Secrets are never taken from the command line: a chosen
// secret comes from --secret-file (mode 0600), and one the server
// generates is printed once, by the command that made it.

// callAndPrint makes one API call within the command's timeout and prints
// its answer with table (or as JSON).
func callAndPrint[T any](g *globals, call func(c *api.Client, ctx context.Context) (T, error), table func(w *tabwriter.Writer, v T)) error {
	ctx, cancel := g.ctx()
	defer cancel()
	v, err := call(g.client(), ctx)
	if err != nil {
		return err
	}
	return g.print(v, func(w *tabwriter.Writer) { table(w, v) })
}

// oneIdentity prints one identity as a table.
func oneIdentity(w *tabwriter.Writer, id api.Identity) { identityTable(w, []api.Identity{id}) }

func whoamiCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "whoami", Short: "Show which identity the credential is and what it may do", Args: args(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAndPrint(g, (*api.Client).Whoami, func(tw *tabwriter.Writer, w api.Whoami) {
				if w.Authenticated {
					fmt.Fprintf(tw, "identity\t%s:%s\n", w.Kind, w.Name)
				} else {
					fmt.Fprintf(tw, "identity\tnone (no credential)\n")
				}
				fmt.Fprintf(tw, "admin\t%s\n", w.Admin)
				fmt.Fprintf(tw, "may read\tcluster %v, identities %v, message bodies %v\n", w.CanRead, w.CanReadIdentities, w.CanReadBodies)
				fmt.Fprintf(tw, "may change\t%v\n", w.CanWrite)
				fmt.Fprintf(tw, "server requires auth\t%v\n", w.AuthRequired)
			})
		},
	}
}

func identityTable(w *tabwriter.Writer, ids []api.Identity) {
	fmt.Fprintln(w, "NAME\tKIND\tGROUP\tSTATE\tSECRET\tPUBLISH\tCONSUME\tGROUPS\tADMIN\tBODIES\tUPDATED")
	for _, id := range ids {
		state := "enabled"
		if id.Disabled {
			state = "disabled"
		}
		secret := "cert only"
		if id.HasSecret {
			secret = "hashed"
		}
		updated := "-"
		if !id.Updated.IsZero() {
			updated = id.Updated.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\n", id.Name, id.Kind, dash(id.Group), state, secret,
			dash(strings.Join(id.Grants.Publish, ",")), dash(strings.Join(id.Grants.Consume, ",")), dash(strings.Join(id.Grants.Groups, ",")),
			dash(id.Grants.Admin), id.Grants.ReadBodies, updated)
	}
}

// secretTable prints a created or rotated identity and, when the server
// generated it, its secret: the only time anyone sees it.
func secretTable(what string) func(w *tabwriter.Writer, out api.IdentitySecret) {
	return func(w *tabwriter.Writer, out api.IdentitySecret) {
		oneIdentity(w, out.Identity)
		if out.Secret == "" {
			fmt.Fprintf(w, "\n%s: the secret is the one from --secret-file\n", what)
			return
		}
		fmt.Fprintf(w, "\n%s; its secret, shown this once (the server keeps only a hash):\n", what)
		fmt.Fprintf(w, "secret\t%s\n", out.Secret)
		fmt.Fprintf(w, "credentials\t%s\t(put them in a file only the client's user can read: chmod 600)\n", out.Credentials)
	}
}

// readSecretFile reads a chosen secret from a file only its owner reads.
func readSecretFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	s, err := auth.ReadSecretFile(path)
	if err != nil {
		return "", usageError{fmt.Errorf("--secret-file: %w", err)}
	}
	if err := auth.CheckSecret(s); err != nil {
		return "", usageError{fmt.Errorf("--secret-file: %w", err)}
	}
	return s, nil
}

// grantFlags are the grant options of identity add, grant and revoke.
type grantFlags struct {
	publish, consume, groups []string
	admin                    string
	readBodies               bool
}

func (f *grantFlags) add(c *cobra.Command, groupFlag string, revoke bool) {
	c.Flags().StringSliceVar(&f.publish, "publish", nil, "subject pattern it may send to (repeat or comma-separate; prefix* and * match many)")
	c.Flags().StringSliceVar(&f.consume, "consume", nil, "subject pattern it may pull from")
	c.Flags().StringSliceVar(&f.groups, groupFlag, nil, "consumer-group pattern it owns (consumes as)")
	if revoke {
		c.Flags().Bool("admin", false, "drop its admin role")
	} else {
		c.Flags().StringVar(&f.admin, "admin", "", "admin role: none, read or write (admins only)")
	}
	c.Flags().BoolVar(&f.readBodies, "read-bodies", false, "a read admin may see message bodies (dead letters)")
}

func (f *grantFlags) grants() (api.Grants, error) {
	if _, err := auth.ParseAdminRole(f.admin); err != nil {
		return api.Grants{}, usageError{err}
	}
	return api.Grants{Publish: f.publish, Consume: f.consume, Groups: f.groups, Admin: f.admin, ReadBodies: f.readBodies}, nil
}

func identityCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "identity", Aliases: []string{"identities"}, Short: "List, add, remove, enable, disable identities and rotate their secrets"}
	list := &cobra.Command{
		Use: "list", Short: "List identities (never their secrets)", Args: args(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAndPrint(g, (*api.Client).Identities, identityTable)
		},
	}
	show := &cobra.Command{
		Use: "show NAME", Short: "Show one identity", Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.Identity, error) { return c.Identity(ctx, a[0]) }, oneIdentity)
		},
	}
	var kind, group, secretFile string
	var noSecret, disabled bool
	var gf grantFlags
	add := &cobra.Command{
		Use:   "add NAME --kind app|broker|admin [--group G] [--secret-file F]",
		Short: "Add an identity; prints its generated secret once",
		Long: "add creates an identity. Without --secret-file the server generates a secret and this\n" +
			"command prints it once (with the name:secret line a client's credentials file holds).\n" +
			"A broker's --group is the broker group it may register as (default: NAME).",
		Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if _, err := auth.ParseKind(kind); err != nil {
				return usageError{fmt.Errorf("--kind: %w", err)}
			}
			secret, err := readSecretFile(secretFile)
			if err != nil {
				return err
			}
			if noSecret && secret != "" {
				return usageError{errors.New("--secret-file and --no-secret exclude each other")}
			}
			grants, err := gf.grants()
			if err != nil {
				return err
			}
			req := api.IdentityRequest{Name: a[0], Kind: kind, Group: group, Secret: secret, NoSecret: noSecret, Grants: grants, Disabled: disabled}
			return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.IdentitySecret, error) {
				return c.CreateIdentity(ctx, req)
			},
				secretTable("identity "+a[0]+" added"))
		},
	}
	add.Flags().StringVar(&kind, "kind", "", "app (producer/consumer), broker or admin")
	add.Flags().StringVar(&group, "group", "", "a broker's group (default NAME)")
	add.Flags().StringVar(&secretFile, "secret-file", "", "take the secret from this file (mode 0600, at least 16 characters) instead of generating one")
	add.Flags().BoolVar(&noSecret, "no-secret", false, "no secret: the identity proves itself by TLS client certificate only")
	add.Flags().BoolVar(&disabled, "disabled", false, "create it disabled")
	gf.add(add, "consumer-group", false)
	var rotateFile string
	rotate := &cobra.Command{
		Use: "rotate NAME [--secret-file F]", Short: "Give an identity a new secret (generated and printed once, or from --secret-file)", Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			secret, err := readSecretFile(rotateFile)
			if err != nil {
				return err
			}
			return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.IdentitySecret, error) {
				return c.RotateSecret(ctx, a[0], secret)
			},
				secretTable("identity "+a[0]+" has a new secret; the old one no longer works"))
		},
	}
	rotate.Flags().StringVar(&rotateFile, "secret-file", "", "take the new secret from this file (mode 0600) instead of generating one")
	rm := &cobra.Command{
		Use: "rm NAME", Aliases: []string{"remove", "delete"}, Short: "Remove an identity", Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.Identity, error) { return c.DeleteIdentity(ctx, a[0]) },
				func(w *tabwriter.Writer, id api.Identity) { fmt.Fprintf(w, "identity %s removed\n", id.Name) })
		},
	}
	c.AddCommand(list, show, add, rotate, rm)
	for _, enabled := range []bool{true, false} {
		name := "disable"
		if enabled {
			name = "enable"
		}
		c.AddCommand(&cobra.Command{
			Use: name + " NAME", Short: strings.ToUpper(name[:1]) + name[1:] + " an identity", Args: args(1),
			RunE: func(cmd *cobra.Command, a []string) error {
				return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.Identity, error) {
					return c.SetIdentityEnabled(ctx, a[0], enabled)
				}, oneIdentity)
			},
		})
	}
	return c
}

func grantCmd(g *globals) *cobra.Command {
	var gf grantFlags
	c := &cobra.Command{
		Use:   "grant NAME [--publish P] [--consume P] [--group G] [--admin read|write] [--read-bodies]",
		Short: "Add rights to an identity",
		Long: "grant adds subject patterns an identity may publish to or consume, consumer groups it owns\n" +
			"(--group), sets an admin's role (--admin) and lets a read admin see message bodies\n" +
			"(--read-bodies). Patterns are exact names, * (everything) or a prefix ending in *.",
		Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			grants, err := gf.grants()
			if err != nil {
				return err
			}
			if len(grants.Publish)+len(grants.Consume)+len(grants.Groups) == 0 && grants.Admin == "" && !grants.ReadBodies {
				return usageError{errors.New("name something to grant: --publish, --consume, --group, --admin or --read-bodies")}
			}
			return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.Identity, error) { return c.Grant(ctx, a[0], grants) }, oneIdentity)
		},
	}
	gf.add(c, "group", false)
	return c
}

func revokeCmd(g *globals) *cobra.Command {
	var gf grantFlags
	c := &cobra.Command{
		Use:   "revoke NAME [--publish P] [--consume P] [--group G] [--admin] [--read-bodies]",
		Short: "Take rights away from an identity",
		Args:  args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			admin, _ := cmd.Flags().GetBool("admin")
			r := api.Revoke{Publish: gf.publish, Consume: gf.consume, Groups: gf.groups, Admin: admin, ReadBodies: gf.readBodies}
			if len(r.Publish)+len(r.Consume)+len(r.Groups) == 0 && !r.Admin && !r.ReadBodies {
				return usageError{errors.New("name something to revoke: --publish, --consume, --group, --admin or --read-bodies")}
			}
			return callAndPrint(g, func(c *api.Client, ctx context.Context) (api.Identity, error) { return c.Revoke(ctx, a[0], r) }, oneIdentity)
		},
	}
	gf.add(c, "group", true)
	return c
}
