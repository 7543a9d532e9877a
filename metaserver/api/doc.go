// Package api is the meta server's admin HTTP JSON API as Go types and a
// client: what qmqctl, the web console and scripts speak. It imports nothing
// of etcd, so the CLI stays small.
//
// # Endpoints
//
// Every path is under /api/v1. Reads need no token; every change needs the
// header "Authorization: Bearer <token>" and is answered 401 without it,
// before anything is changed. Errors are {"error": "..."} with a 4xx or 5xx
// status: 400 bad input, 401 no or wrong token, 404 unknown subject, group or
// dead letter, 409 a change that breaks a rule (removing a route's last
// group, a switchover of a group without a slave or a master, or one a
// master refuses), 501 a broker that does not know the command, 502 every
// broker relayed to failed (or a switchover's master cannot be reached),
// 503 etcd is unreachable or the meta server is closing, 504 a switchover
// that did not complete in time.
//
//	GET    /status                                    Status
//	GET    /brokers                                   []Broker
//	GET    /groups                                    []Group
//	GET    /routes                                    []Route
//	GET    /routes/{subject}                          Route
//	POST   /routes/{subject}/groups                   GroupRequest → Route       (token)
//	DELETE /routes/{subject}/groups/{group}           Route                      (token)
//	POST   /groups/{group}/readonly                   ReadonlyRequest → Group    (token)
//	DELETE /groups/{group}/readonly?subject=S         Group                      (token)
//	POST   /groups/{group}/switchover                 SwitchoverRequest → Switchover (token)
//	GET    /consumers?subject=S                       []ConsumerGroup (with backlog)
//	POST   /consumers/{subject}/{group}/reset         ResetRequest → ActionResult (token)
//	POST   /consumers/{subject}/{group}/{id}/offline  ActionResult               (token)
//	POST   /consumers/{subject}/{group}/{id}/online   ActionResult               (token)
//	GET    /deadletters/{subject}/{group}?after=N&max=N   DeadLetters
//	GET    /deadletters/{subject}/{group}/{id}        DeadLetters (inspect one)
//	POST   /deadletters/{subject}/{group}/redrive     DeadLetterAction → DeadLetters (token)
//	POST   /deadletters/{subject}/{group}/purge       DeadLetterAction → DeadLetters (token)
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
