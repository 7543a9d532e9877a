package ctl

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func failoverCmd(g *globals) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "failover --force GROUP",
		Short: "Force an unclean failover of a group whose master is gone to its slave",
		Long: "failover --force lets the group's slave take the group although it is not its eligible slave\n" +
			"(pkg/failover): the master is gone and no slave is known to hold everything it acknowledged.\n" +
			"Messages the master acknowledged that the slave never copied are lost, and the old master,\n" +
			"should it come back, cuts them from its logs when it rejoins as the slave. Refused while the\n" +
			"group has a live master (use switchover) or no slave.",
		Args: args(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !force {
				return usageError{fmt.Errorf("an unclean failover may lose acknowledged messages: say --force")}
			}
			ctx, cancel := g.ctx()
			defer cancel()
			r, err := g.client().ForceFailover(ctx, a[0])
			if err != nil {
				return err
			}
			return g.print(r, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "group\t%s\n", r.Group)
				fmt.Fprintf(w, "old master\t%s\n", dash(r.OldMaster))
				fmt.Fprintf(w, "may take the group\t%s\n", r.Slave)
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, "yes, fail over uncleanly")
	return c
}
