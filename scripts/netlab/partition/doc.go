// Package partition runs a QMQ-Go cluster in a netlab lab and cuts it:
// the partition suite of scripts/qmqbench and the partition gate test.
//
// # The cluster
//
// Each server has a host of its own: a meta server with its embedded etcd
// (host meta; etcd listens on that namespace's loopback), a realtime group
// (rt1, rt2: started master and slave, --wait-slave), optionally a delay
// group (dl1, dl2: likewise) and the client (cli). The client program
// (ClientMain, run in cli by the caller's binary) produces through the
// meta server with unique ids — 4 synchronous senders of realtime
// messages, 2 of messages due 2 s later — consumes the subject with one
// consumer, and probes every broker directly (a send to that address
// alone every 25 ms) so that who acknowledged a write is known. It reports
// each event on a line (see client.go); the controller (Run) keeps the
// ledger.
//
// # Scenarios
//
// Each cuts for Hold and heals; who is master is read from /metrics at the
// start of each:
//
//	master-meta   the masters from the meta server and etcd, both ways;
//	              the client and the slaves still reach them
//	master-slave  each master from its slave, both ways
//	master-isolated  each master from its slave and from the meta server,
//	              both ways; the client still reaches it (its slave takes
//	              over; the old master rejoins as its slave after the heal)
//	client-meta   the client from the meta server, both ways
//	asymmetric    the realtime master's frames to its slave dropped (its
//	              slave's still arrive); the meta server's frames to the
//	              delay master dropped
//	slow          both masters behind a 200 ms, 5 % loss link (each
//	              direction)
//
// Between scenarios the controller waits (bounded) until each group is a
// master with its slave again.
//
// # Figures
//
//	lost_acked          acknowledged sends (routed and probes) never
//	                    consumed by the end (waiting up to DrainTimeout)
//	dual_master_acks    probe acknowledgements by a broker X of a group
//	                    sandwiched by its rival Y: Y acknowledged a write
//	                    before X's was sent and another write sent after
//	                    X's was acknowledged, all within DualWindow (two
//	                    masters taking writes in one epoch window; two real
//	                    failovers within DualWindow do not happen here)
//	early_delayed       delayed messages handed to the handler before their
//	                    deliver-at time
//	heal_recovery_s     per scenario, the slowest group's time from the
//	                    heal to the first routed send it acknowledged after
//	                    it (a group that never stopped answers at once);
//	                    the figure is the worst scenario
//	stall               per scenario and group, the longest time from the
//	                    cut to the recovery without a routed acknowledgement
//	rejoin_s            per scenario, heal to both groups paired again
package partition
