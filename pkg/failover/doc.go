// Package failover is a broker group's role loop, shared by realtime and
// delay groups: Member registers a broker with the meta servers in its role,
// keeps its master's write Gate, maintains the group's eligible set, and
// campaigns, takes over, promotes, demotes and hands over. Each server
// implements Server (promote in place, demote, report, hand over) and keeps
// its own log shipping, which reports to the loop through SlaveWatch (on a
// master) and CopyWatch (on a slave). The epoch history file (History*) is
// the realtime store's record of which master wrote which part of its logs.
//
// # The rule
//
// Fence only where a rival can exist: a master must never acknowledge a
// write after another broker of its group became master, and must not stop
// writing for any other reason.
//
// # Model
//
// A group is one master and at most one slave. Its eligible set, kept by
// the meta server in etcd (eligible/<group>), names the master it belongs to,
// the one slave that may take the group over ("" none) and the mode: sync
// when the master runs --wait-slave. Only the master changes it
// (protocol.CmdEligible, a compare-and-swap on the master's lease and the
// set's revision); an election replaces it in the same transaction. A free
// master seat may be taken by the set's master (its lease lapsed: it wins
// again at a new epoch), by its eligible slave when the master released the
// group (switchover, clean close, an admin's forced failover) or does not
// answer a ping, by anyone when the group has no set, by nobody else. A
// takeover lets the eligible slave of a sync set move a held seat to itself
// when the master at the epoch it names does not answer a ping.
//
// The master's write state (Gate, reported in heartbeats, /metrics
// qmq_failover_write_state and _changes_total, qmqctl groups, the console;
// every change is logged at warn with its reason):
//
//	writable      sync: replies wait for the eligible slave (or for a slave
//	              joining); async: a lease holds (until a Now deadline)
//	alone         no eligible slave: nobody else can be elected
//	readonly      sync: the eligible slave is gone and the set cannot be
//	              shrunk (or SlaveDown is readonly): sends StatusReadonly
//	fenced        not registered yet; async: neither lease holds
//	deposed       another broker is the master: it becomes its slave
//	handing-over  a switchover or close stopped writes
//
// Sync mode. A slave joins: once it lags under joinLag the master makes
// every reply wait for it from a switch point (Server.WaitSlave), and once
// it holds the switch point it holds every acknowledged write: only then is
// it recorded. A recorded slave that is gone (its replication connection
// closed, silent for SuspectAfter, or lagging SlaveLagLimit) is removed
// before the master serves alone; while it cannot be removed the master is
// readonly. A promoted master starts alone.
//
// Async mode. The master acknowledges alone, so it writes with an eligible
// slave only while it holds its meta lease (renewed within TTL minus a
// margin) or its slave lease: each answer carries a stamp of the master's
// clock; receiving one, the slave promises not to campaign for SlaveLease;
// the master counts stamp + SlaveLease − margin from the latest stamp the
// slave echoes, and only while the slave copies. The slave campaigns only
// once the master's seat is free, its promise has run out (from its own
// start too) and it is eligible (or the group was released).
//
// # Safety, case by case
//
// Sync-mode core: a master acknowledges a write only when the eligible slave
// holds it, or after it removed the slave from the set; a slave stops
// copying before it runs (StopCopy: no acknowledgement leaves after it) and
// promotes at its ends then, so everything the old master acknowledged is
// in its logs, and the old master can acknowledge nothing more: its
// waiting replies never complete, and shrinking the set fails on the moved
// seat (StatusNotMaster: deposed). A slave that ran without winning copies
// again; it promotes only with its copy stopped, so that is safe.
//
//   - Meta servers down (etcd up or not). No election can happen. A master
//     without an eligible slave writes on. Sync: it writes on with its slave;
//     if the slave goes it is readonly until the meta servers or the slave
//     are back. Async: it writes on while its slave copies (slave lease);
//     if the slave goes too, both leases run out: fenced. A master whose
//     lease expired in etcd meanwhile wins again at a new epoch when the meta
//     servers are back (its eligible slave stays eligible).
//   - etcd down. The meta servers refuse registrations and set changes:
//     as above.
//   - Master cut from etcd (or the meta servers), reachable by its slave. As
//     meta down for the master. Its seat frees when its lease expires; a
//     slave that still hears from it does not run (sync), or cannot (async:
//     its promise is renewed with every answer). A slave that cannot hear
//     it either runs: the meta server refuses while the master answers its
//     ping; otherwise the slave wins — in sync mode it stopped copying
//     first, so the old master's replies stop; in async mode it waited out
//     its promise, after which the master's slave lease had ended, and its
//     meta lease ended before the seat was free.
//   - Slave cut from master. The master drops it from the set and serves
//     alone (or readonly while it cannot). The slave suspects the master and
//     asks for a takeover (sync) or waits for a free seat (async): refused
//     while the master answers the meta server's ping; once the master has
//     shrunk the set the slave is not eligible any more. It rejoins when the
//     link heals.
//   - Both cut (the master reaches neither meta servers nor slave). Sync:
//     no acknowledgement can complete, the set cannot shrink: readonly (the
//     slave takes over, the old master is deposed when it reaches a meta
//     server). Async: it writes until both leases run out (at most its meta
//     lease's rest or SuspectAfter), then fenced, before its slave's promise
//     and the seat's lease both expired; what it acknowledged after its
//     slave stopped copying is lost when the slave takes over, as an async
//     failover loses its slave's lag.
//   - Slave crash. Its connection closes: the master applies its policy
//     within a tick (20 ms): set shrunk, alone (or readonly).
//   - Master crash. Sync: the slave's copy fails at once, it takes over
//     (the master does not answer the ping) and promotes in place; clients
//     learn the new master from their long-polling lookups: a failover
//     takes a fraction of a second, and loses nothing acknowledged. Async:
//     after the lease TTL and the slave's promise; it loses the slave's lag.
//   - Master frozen (SIGSTOP) past its lease. The slave takes over (sync) or
//     wins the free seat (async). Resumed, the old master acknowledges
//     nothing: sync replies need the slave, which promoted; async, its gate
//     compares the leases' deadlines with the clock when it takes a write and
//     again when it acknowledges one. Its heartbeat is refused: deposed.
//   - Cluster restart. A master re-registers: its own seat, set kept. A slave
//     runs only as the set's eligible slave (it holds every acknowledged
//     write in sync mode), waiting out its promise in async mode, and only
//     if the set's master does not answer; in a group without a set, only
//     its configured master, or a slave two lease TTLs after its start.
//   - Switchover (and a master's clean close). Writes stop (handing-over),
//     the slave gets everything (Server.HandOver), is recorded if it was not
//     yet, the master leaves its seat releasing the group to it, and the
//     slave wins at its next heartbeat; the old master rejoins as its slave.
//
// An admin's forced failover (qmqctl failover --force) lets a slave that is
// not eligible take a group whose master is gone: unclean, logged, counted.
//
// # Clocks
//
// Leases and stamps are Now readings of one process (monotonic); a slave
// lease is compared only by the master that stamped it, whose margin
// (SlaveLease/10, at least 100 ms) covers the two clocks' rates.
// SlaveLease is a constant of both roles (NewOptions): they must agree.
package failover
