// Package api is the meta server's admin HTTP JSON API as Go types and a
// client: what qmqctl, the web console and scripts speak. It imports nothing
// of etcd, so the CLI stays small.
//
// # Endpoints
//
// Every path is under /api/v1. A request names its identity with the
// header "Authorization: Bearer <name>:<secret>", "Authorization: Bearer
// <admin token>" (identity admin), or basic auth (curl -u name:secret).
// What each endpoint needs:
//
//   - reads of cluster state: nothing, or an identity with admin read when
//     the meta server runs with --auth;
//   - identities: admin read (whoami: anyone);
//   - message bodies (inspecting a dead letter): read bodies (admin write
//     has it, admin read with the readBodies grant); a listing without it
//     shows dead letters with their bodies left out (bodyHidden);
//   - every change: admin write.
//
// A credential that does not authenticate is answered 401 on every
// endpoint; a missing one 401 where one is needed; an identity without the
// right 403. Refusals are answered before anything is touched, and their
// Error body names the request refused, the right it needs and the
// identity that lacks it. Other errors are {"error": "..."} with a 4xx or
// 5xx status: 400 bad input, 404 unknown subject, broker group, consumer
// group, consumer, identity or dead letter (a redrive or purge that changes
// nothing answers 404 naming what it did not find), 409 a change that breaks a rule (removing a route's last
// group, a switchover of a group without a slave or a master, or one a
// master refuses; an identity that exists; removing, disabling or demoting
// the last enabled admin with write access), 501 a broker that does not
// know the command, 502 every broker relayed to failed (or a switchover's
// master cannot be reached), 503 etcd is unreachable or the meta server
// is closing, 504 a switchover that did not complete in time.
//
//	GET    /whoami                                    Whoami             (anyone)
//	GET    /status                                    Status
//	GET    /brokers                                   []Broker
//	GET    /groups                                    []Group
//	GET    /routes[?subject=S]                        []Route (S's realtime and delay routes; 404 none)
//	GET    /routes/{subject}                          Route (the realtime one)
//	POST   /routes/{subject}/groups                   GroupRequest → Route       (write)
//	DELETE /routes/{subject}/groups/{group}           Route                      (write)
//	POST   /groups/{group}/readonly                   ReadonlyRequest → Group    (write)
//	DELETE /groups/{group}/readonly?subject=S         Group                      (write)
//	POST   /groups/{group}/switchover                 SwitchoverRequest → Switchover (write)
//	GET    /subjects/{subject}                        Subject (routes, rates, groups, consumers; 404 unknown)
//	GET    /consumers?subject=S                       []ConsumerGroup (with backlog)
//	POST   /consumers/{subject}/{group}/reset         ResetRequest → ActionResult (write; 404 unknown group unless create)
//	POST   /consumers/{subject}/{group}/{id}/offline  ActionResult               (write)
//	POST   /consumers/{subject}/{group}/{id}/online   ActionResult               (write)
//	GET    /deadletters/{subject}/{group}?after=N&max=N   DeadLetters
//	GET    /deadletters/{subject}/{group}/{id}        DeadLetters (inspect one)  (read bodies)
//	POST   /deadletters/{subject}/{group}/redrive     DeadLetterAction → DeadLetters (write)
//	POST   /deadletters/{subject}/{group}/purge       DeadLetterAction → DeadLetters (write)
//	GET    /messages?id=ID | ?key=KEY [&subject=S]     Lookup (bodies with read bodies; 404 not found; by id every delay server; S: S's delay servers, by key too)
//	GET    /trace?id=ID [&subject=S]                  Trace                      (404 not found)
//	GET    /trace?key=KEY [&subject=S]                []Trace, one per message id
//	GET    /identities                                []Identity                 (admin read)
//	GET    /identities/{name}                         Identity                   (admin read)
//	POST   /identities                                IdentityRequest → IdentitySecret (write)
//	DELETE /identities/{name}                         Identity                   (write)
//	POST   /identities/{name}/enable|disable          Identity                   (write)
//	POST   /identities/{name}/rotate                  SecretRequest → IdentitySecret (write)
//	PUT    /identities/{name}/grants                  Grants → Identity (replace) (write)
//	POST   /identities/{name}/grant                   Grants → Identity (add)    (write)
//	POST   /identities/{name}/revoke                  Revoke → Identity          (write)
//
// An identity's secret is stored hashed and never answered; a secret the
// server generates (create or rotate without one) is answered once, in
// IdentitySecret. Identity admin always exists: each meta server makes
// sure at start that it holds the admin token.
//
// Consumer-group, offset and dead-letter actions are relayed by the meta
// server to the master of every broker group on the subject's route; an
// ActionResult or DeadLetters lists the groups that failed, and the request
// fails with 502 only when all of them did.
//
// A switchover is relayed to the group's live master (protocol.CmdSwitchover)
// and answered once a different broker holds the group's master seat at a
// larger epoch, or with an error when that did not happen within the
// request's timeout.
package api
