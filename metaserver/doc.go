// Package metaserver is QMQ-Go's meta server: it tracks broker groups,
// routes subjects to them, registers consumers, and serves the admin API, the
// web console and metrics. Meta servers are stateless: all state lives in
// etcd, and any number of them can run against one etcd cluster.
//
// # Key layout
//
// Everything lives under one prefix (Options.Prefix, default "/qmq/");
// values are JSON:
//
//	/qmq/brokers/<group>/<master|slave>          a broker's registration, on its lease
//	/qmq/routes/<realtime|delay>/<subject>       {"groups":[...],"createdAt":...}
//	/qmq/readonly/<group>/<subject or *>         an admin's readonly mark
//	/qmq/consumers/<subject>/<group>/<client id> a consumer's registration, on its lease
//	/qmq/offline/<subject>/<group>/<client id>   an admin took the consumer offline
//	/qmq/metaservers/<tcp address>               a running meta server, on its lease
//	/qmq/identities/<name>                       an identity: pkg/auth.Entry, its secret hashed
//	/qmq/eligible/<group>                        the group's eligible set (pkg/failover)
//
// # The view
//
// Each meta server reads the whole prefix once and watches it from the
// revision after that read, applying every change to an in-memory view. All
// lookups and admin reads are served from the view, never from etcd: a
// lookup is a few map reads under a read lock, which is what makes tens of
// thousands of lookups a second cheap, and lookups keep working (on the last
// view) while etcd is unreachable. When the watch breaks or its revision is
// compacted away, the server reads everything again and watches anew,
// serving the old view meanwhile. /readyz reports whether the watch is up.
// Responses carry the view's revision as their version; since revisions are
// global to the etcd cluster, a client talking to several meta servers keeps
// the answer with the highest version and ignores older ones. A lookup that
// names a wait and the hash of the answer the client holds
// (protocol.RouteHash) is a long poll (longpoll.go): it is answered as soon
// as a change of the view makes the answer differ, or after the wait (at
// most 30 s), so clients learn of a failover within a round trip.
//
// # Brokers
//
// A broker (realtime or delay, master or slave) sends CmdRegister to any
// meta server every third of the broker TTL (default 10 s). The first one
// grants an etcd lease of that TTL and writes the registration on it; the
// lease id is stored in the registration and returned to the broker (with
// the address of its group's live master, which a slave replicates from),
// and the broker sends it back, so any meta server can keep it alive with
// KeepAliveOnce (an expired lease is told apart from an unreachable etcd
// with TimeToLive, and replaced by a new one). A
// heartbeat rewrites the registration only when the broker's state, address
// or load changed. A broker that dies stops heartbeating and its
// registration vanishes when the lease expires, at most one TTL after its
// last heartbeat; a broker that shuts down cleanly sends RegisterLeaving and
// its lease is revoked at once. A group and role is held by one broker id at
// a time (an etcd transaction on the key's create revision): a second master
// of a group is refused until the first one's lease is gone.
//
// # Elections, epochs and switchover
//
// A group's master registration is its election and its eligible set
// decides who may win it (election.go; the safety argument is in
// pkg/failover). The master key's epoch is the etcd revision of the
// election, new and larger with every one, kept by heartbeats. The eligible
// set (eligible/<group>, on no lease) names the master it belongs to, its
// eligible slave and whether the master runs --wait-slave (sync); only that
// master changes it (protocol.CmdEligible: a compare-and-swap on its lease
// and the set's revision; StatusNotMaster to a deposed master,
// StatusStaleEpoch to a request of an older term of its own). A free seat
// goes to the set's master, to its eligible slave when the master released
// the group (a master with an eligible slave that leaves cleanly releases it)
// or does not answer a ping (CmdPing, 500 ms), to anyone in a group without
// a set, and to nobody else. A takeover (RegisterTakeover) moves a held seat
// to the eligible slave of a sync set when the master at the epoch it names
// does not answer a ping, in one transaction. A forced failover (POST
// /api/v1/groups/{group}/failover, qmqctl failover --force) lets the slave
// of a group without a master take it although it is not eligible. Register
// responses tell each broker the set (eligible, sync, released, its own).
// A slave registers the epoch of the master it copies, so a
// slave still on an older epoch shows it has not caught up with the latest
// election. Each broker also reports its replication lag (a slave: its own;
// a master: its slave's) and a master its write state and why; the API, the
// console, qmqctl and /metrics show seats, epochs, write state, eligible
// slave and lag per broker and per group (a group's lag is the larger of its
// master's and its slave's reports).
//
// A planned switchover (POST /api/v1/groups/{group}/switchover, qmqctl
// switchover) needs a live master and a slave. The meta server relays
// protocol.CmdSwitchover to the master, naming its epoch and a handover
// bound (two thirds of the switchover's timeout, default 30 s); the master
// stops writes, waits until its slave holds its committed ends, records it
// as eligible if it was not yet, leaves its seat releasing the group to it
// and rejoins as a slave; the slave's next heartbeat finds the group
// released to it and it wins the election. The meta server answers once its view shows a
// different broker holding the master seat at a larger epoch, naming the
// old and the new master. A master that refuses keeps the group (409, with
// its reason), one that does not know the command is reported as such
// (501), and a switchover that did not complete in time says where it
// stands (504: the old master still registered, or no master yet). One
// switchover per group runs at a time on a meta server.
//
// A group's state, for a given subject: unavailable when it has no live
// master; readonly when the master reports itself readonly (a lagging slave,
// a full disk) or an admin marked the group readonly for that subject or for
// "*"; read-write otherwise. Slaves do not make a group available.
//
// # Routes
//
// A subject's first lookup assigns its route: Options.MinGroups writable
// groups of the right kind (delay groups for delay producers, realtime
// groups for everyone else), least loaded first (fewest routes, then fewest
// messages in per second, then name). The route is created in an etcd
// transaction that succeeds only if the key does not exist yet, so meta
// servers racing on a new subject all answer with the one that won. Routes
// never shrink or grow by themselves: admins add and remove groups (never a
// route's last one), in compare-and-swap transactions on the key's mod
// revision. Lookups of %RETRY% and %DEAD% subjects use their real subject's
// route. A lookup answers every group of the route with its state and
// addresses; clients send only to writable groups and pull from readable
// ones (protocol.GroupState.Writable, Readable).
//
// # Consumers
//
// A consumer sends CmdClientHeartbeat for each (subject, group) it
// subscribes to; its registration lives on a lease of Options.ClientTTL
// (default 30 s), kept alive the same way as a broker's, so the console
// lists live consumers. An admin can take a consumer offline: the mark is
// kept in etcd (so lookups and heartbeats tell the consumer, which stops
// pulling) and relayed to the subject's masters.
//
// # Identities and permissions
//
// Identities (pkg/auth: applications, brokers of a group, admins with a
// read or write role) live under identities/; the view keeps them and
// publishes an auth.Policy whose version is the etcd revision of the last
// identity change (identities.go), which both ports check requests
// against, so authentication keeps working on the last view while etcd is
// away. Identity "admin" (admin write) holds the admin token: each meta
// server writes it at start when it does not (the token is the way back
// in). The token comes from Options.AdminToken (code), QMQ_ADMIN_TOKEN or
// Options.AdminTokenFile (mode 0600; generated there and only its path
// logged when missing); never from the command line, never logged.
//
// TCP (authz.go): a connection proves its identity with CmdAuth. A lookup
// needs any identity (and, where it would give a subject its first route,
// the right to publish it, or to consume it as the lookup's group), a
// registration a broker of its group, a consumer
// heartbeat an identity that may consume the subject as the group, and
// CmdPolicy a broker or admin. Without Options.RequireAuth (--auth) a
// connection that named no identity may do all of it but fetch the
// policy; one that authenticated is held to its identity. Refusals answer
// StatusUnauthenticated or StatusForbidden and change nothing.
//
// HTTP: "Authorization: Bearer name:secret", "Bearer <admin token>" or
// basic auth. Changes need admin write, message bodies read bodies,
// identities admin read, cluster reads (and /metrics) admin read under
// --auth and nothing otherwise; 401 without a (valid) credential, 403
// without the right, before anything is touched. Refusals on both ports
// are counted (qmq_meta_refusals_total by port and reason) and logged at
// most 20 a minute; the TCP port also counts what pkg/netserver refuses
// before a command is served (qmq_meta_refused_total{reason}: no identity
// under --auth, a failed CmdAuth) and its connection bounds
// (qmq_meta_connections_closed_total, _partial_frame_bytes,
// _tls_handshake_failures_total).
//
// Brokers keep the policy: they long-poll CmdPolicy (policy.go) through
// pkg/metaclient.PolicyCache, which persists it, so a broker authenticates
// its own clients through a meta outage.
//
// # Admin
//
// The HTTP API is documented in package api. Every request is checked as
// above, and every change is logged with the identity that made it.
// Actions that concern a
// broker's data (reset offset, consumer offline/online, broker stats and
// backlog, dead letters) are relayed over TCP to the master of each group
// on the subject's route with protocol.CmdConsumerManage, CmdBrokerStats and
// CmdDeadLetters (bodies in pkg/protocol/admin.go); the answer lists the
// groups that failed. Lookups and traces (GET /messages, /trace; lookup.go)
// ask every realtime master with CmdFindMessages (pkg/protocol/lookup.go)
// and build a message's life from the copies found. A switchover is relayed to one group's master with
// protocol.CmdSwitchover (pkg/protocol/switchover.go). The web console (console/, embedded with go:embed) is
// plain HTML and JavaScript over the same API; qmqctl (package ctl) is the
// command line over it.
//
// # Health
//
// /healthz answers while the process runs. /readyz answers 200 only while
// etcd answers a probe (every second) and the watch is established; without
// etcd a meta server still answers lookups of known routes and reads of the
// admin API from its last view, but assigns no new route and takes no
// registration or change (those answer StatusUnavailable / HTTP 503).
// /metrics has lookups by client type, heartbeats, route assignments,
// relayed admin requests, admin changes by outcome, switchovers by outcome,
// groups by state, each registered broker's epoch and replication lag
// (qmq_meta_broker_epoch, qmq_meta_replica_lag_bytes and _seconds, by group
// and role), the view's revision and whether etcd is up, refusals, the
// policy's version and identity count, and the policies sent to brokers.
// and role), elections, takeovers, eligible-set changes and forced failovers
// (qmq_meta_elections_total, _takeovers_total, _eligible_set_changes_total,
// _forced_failovers_total), the view's revision and whether etcd is up.
package metaserver
