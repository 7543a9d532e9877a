// Package ctl is qmqctl: the command tree over the meta server's admin API
// (package api). It is a library so tests run every command in process;
// metaserver/cmd/qmqctl only calls Main.
//
// Output is a table for people, or JSON with --json. Exit codes: 0 success,
// 1 the request failed (server error, unreachable server, a change the
// server refuses as breaking a rule), 2 bad usage, 3 unauthorized or
// forbidden (a missing or wrong credential, or an identity without the
// right), 4 not found: a subject, consumer group, consumer or dead letter
// nobody knows, named in the message (an offset reset creates a consumer
// group only with --create; a redrive or purge that changes nothing says
// so).
//
// The meta server is named by its HTTP admin address: --meta-http, else
// $QMQ_META_HTTP, else 127.0.0.1:20980 (scripts/run-local.sh's). Its TCP
// address (clients' --meta and $QMQ_META, 127.0.0.1:20880 locally) answers
// no HTTP: given that, qmqctl says so and exits 2. --meta is the old name of
// --meta-http, still accepted with a warning.
//
// The credential ("name:secret", or the admin token alone for identity
// admin) comes from --token-file (a file only its owner may read) or
// QMQ_TOKEN; never from the command line or a flag's default.
//
// Commands:
//
//	status                                    cluster overview
//	brokers | groups | routes [SUBJECT]       what is registered and routed (roles, epochs, replica lag)
//	route add|remove SUBJECT GROUP            grow or shrink a route
//	readonly mark|unmark GROUP [--subject S]  stop or resume producers on a group
//	switchover GROUP [--wait 30s]             hand a group from its master to its slave
//	consumers [--subject S]                   consumer groups, consumers, backlog
//	offset reset SUBJECT GROUP --to T [--create]  earliest, latest or an RFC 3339 time (--create: a new group)
//	consumer offline|online SUBJECT GROUP ID  take a consumer out or back
//	dead list|inspect|redrive|purge ...       dead letters of a consumer group
//	whoami                                    the credential's identity and rights
//	identity list|show|add|rm|enable|disable|rotate  identities (add and rotate print a generated secret once)
//	grant|revoke NAME [--publish P] [--consume P] [--group G] [--admin R] [--read-bodies]
package ctl
