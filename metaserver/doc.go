// Package metaserver is QMQ-Go's meta server: it tracks broker groups,
// routes subjects to them, registers consumers, and serves the admin API, the
// web console and metrics. Meta servers are stateless: all state lives in
// etcd, and any number of them can run against one etcd cluster. The longer
// explanations behind the rules below are in NOTES.md ("Design details").
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
// revision after that read into an in-memory view; every lookup and admin
// read is served from the view (a few map reads under a read lock), so
// lookups go on while etcd is away. A broken or compacted watch reads
// everything again, serving the old view meanwhile. Answers carry the
// view's revision as their version (clients keep the highest). A lookup
// that names a wait and the hash of the answer the client holds is a long
// poll (longpoll.go), answered as soon as the answer differs or after the
// wait (at most 30 s), so clients learn of a failover within a round trip.
//
// # Brokers
//
// A broker sends CmdRegister to any meta server every third of the broker
// TTL (default 10 s). The first grants an etcd lease and writes the
// registration on it; the lease id goes back to the broker, which sends it
// again, so any meta server can keep it alive. A heartbeat rewrites the
// registration only when something in it changed. A broker that dies
// vanishes when its lease expires; one that shuts down cleanly sends
// RegisterLeaving and its lease is revoked at once. A master whose
// registration connection closes and that does not answer a ping is shown
// unavailable by the API and the console within a second or two
// (masterwatch.go), before its lease expires. A seat (group, role) is held
// by one broker id at a time (a transaction on the key's create revision).
//
// # Elections, epochs and switchover
//
// A group's master registration is its election and its eligible set decides
// who may win it (election.go; the safety argument is in pkg/failover). The
// epoch counts the group's elections: one more than the largest it knew
// (its set's, the holder's, the winner's own), so 1, 2, 3... The
// eligible set names its master, its eligible slave and whether the master
// runs --wait-slave; only that master changes it (CmdEligible, a
// compare-and-swap). A free seat goes to the set's master, to its eligible
// slave when the master released the group or does not answer a ping (500
// ms), to anyone in a group without a set, and to nobody else; a takeover
// moves a held seat to the eligible slave of a sync set whose master does
// not answer, in one transaction. A forced failover (POST
// /api/v1/groups/{group}/failover) lets a group's slave take it although not
// eligible. Brokers report their replication lag and write state; the API,
// console, qmqctl and /metrics show seats, epochs, write states, eligible
// slaves and lag.
//
// A planned switchover (POST /api/v1/groups/{group}/switchover) relays
// CmdSwitchover to the live master with its epoch and a handover bound; the
// master stops writes, waits until its slave holds its committed ends,
// releases the group to it and rejoins as a slave. The meta server answers
// once a different broker holds the seat at a larger epoch; a refusal is
// 409, an older broker 501, a timeout 504 saying where it stands.
//
// A group's state for a subject: unavailable without a live master;
// readonly when the master says so (a lagging slave, a full disk) or an
// admin marked the group readonly for the subject or "*"; read-write
// otherwise.
//
// # Routes
//
// A subject's first lookup assigns its route: Options.MinGroups writable
// groups of the right kind, least loaded first, in an etcd transaction that
// succeeds only if the route does not exist (racing meta servers all answer
// with the winner). Routes change only by an admin (never below one group),
// in compare-and-swap transactions. %RETRY% and %DEAD% subjects use their
// real subject's route. A lookup answers every group of the route with its
// state and addresses (protocol.GroupState.Writable, Readable).
//
// # Consumers
//
// A consumer heartbeats (CmdClientHeartbeat) each (subject, group) it
// subscribes to, on a lease of Options.ClientTTL (default 30 s). An admin
// can take a consumer offline: the mark is kept in etcd (lookups and
// heartbeats tell the consumer) and relayed to the subject's masters.
//
// # Identities and permissions
//
// Identities (pkg/auth: applications, brokers of a group, admins with a
// read or write role) live under identities/; the view publishes an
// auth.Policy versioned by the etcd revision of the last identity change,
// which both ports check requests against, so authentication keeps working
// while etcd is away. Identity "admin" holds the admin token, written at
// start when missing, from QMQ_ADMIN_TOKEN or Options.AdminTokenFile (mode
// 0600; generated there when missing, only its path logged); never from the
// command line, never logged.
//
// TCP (authz.go): a connection proves its identity with CmdAuth. A lookup
// needs an identity (and, where it gives a subject its first route, the
// right to publish it or consume it as the lookup's group), a registration
// a broker of its group, a consumer heartbeat the right to consume the
// subject as the group, CmdPolicy a broker or an admin. Without --auth a
// connection that named no identity may do all of it but fetch the policy.
// HTTP: "Authorization: Bearer name:secret", the admin token, or basic auth;
// changes need admin write, message bodies read bodies, identities and
// cluster reads admin read (under --auth); 401 or 403 before anything is
// touched. Refusals on both ports are counted (qmq_meta_refusals_total,
// qmq_meta_refused_total) and logged at a rate limit. Brokers long-poll the
// policy (CmdPolicy, pkg/metaclient.PolicyCache) and persist it, so they
// authenticate their own clients through a meta outage.
//
// # Admin
//
// The HTTP API is documented in package api; every change is logged with
// the identity that made it. What concerns a broker's data (offsets,
// consumers offline, stats and backlog, dead letters, lookups and traces of
// messages) is relayed over TCP to the masters on the subject's route
// (CmdConsumerManage, CmdBrokerStats, CmdDeadLetters, CmdFindMessages; the
// answer lists groups that failed); a switchover to one group's master. The
// web console (console/, go:embed) is plain HTML and JavaScript over the
// same API, with charts of the last hour that the meta server samples every
// Options.HistoryInterval (history.go); qmqctl (package ctl) is the command
// line over it.
//
// # Health
//
// /healthz answers while the process runs; /readyz answers 200 only while
// etcd answers a probe (every second) and the watch is up. Without etcd a
// meta server answers lookups of known routes and admin reads from its last
// view, but assigns no route and takes no registration or change
// (StatusUnavailable / HTTP 503). /metrics has lookups, heartbeats, route
// assignments, relayed and admin requests, switchovers, groups by state,
// each broker's epoch and replication lag, elections, takeovers,
// eligible-set changes, forced failovers, the view's revision, etcd's
// state, refusals and the policy's version.
package metaserver
