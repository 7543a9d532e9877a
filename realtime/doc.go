// Package realtime is the realtime broker: the master of one broker group.
// It stores messages in a realtime/store and serves them to consumer groups
// with no partitions: every consumer of a group pulls from the group's one
// cursor, and the store records each delivery in that consumer's pull log.
//
// # Send
//
// A send request carries a batch of encoded messages. Each is checked (CRC,
// limits, subject) and gets its own status. A message whose (subject, id,
// attempt count) was stored within the dedupe window (default 10 minutes,
// bounded by a capacity of remembered ids) is answered StatusDuplicate
// without being stored again, so a producer's retry or a delay server's
// re-forward does not make a copy. The rest go to the store in one append;
// the reply goes out from the store's commit callback once they are durable
// (group commit under the default sync flush).
//
// # Pull
//
// Every pull goes to the actor of its (subject, consumer group) — broadcast
// subscribers have one actor each — on a shared pool of workers
// (pkg/actor). An actor runs at most a time slice (default 5 ms) before it
// yields to the back of the run queue, so a group with 64 consumers flooding
// pulls takes turns with a group of 2. A pull that finds no message waits in
// its actor (long polling) until new messages of the subject are appended
// (the store's OnAppend wakes the subject's actors with waiting pulls), its
// wait ends (answered empty) or the broker closes. A pull that sat in an
// actor's mailbox past its wait plus PullGrace is answered
// StatusRetryLater: the client has given up on it, so the broker sheds it
// instead of doing stale work. A full mailbox answers StatusBusy at once.
// Pulls of retry subjects do not hand out messages before they are due.
//
// # Ack
//
// Acks are inclusive ranges of a consumer's pull sequences; an empty range
// is a heartbeat. Acks above a gap mean acks were lost: the gap's messages
// are stored again on the group's retry subject, due after RetryDelay. The
// release flag (a consumer closing) hands the consumer's un-acked messages
// back to the group at once. A consumer that neither pulls nor acks for the
// consumer timeout (default 30 s) loses them the same way (livenessLoop).
//
// # Admin
//
// CmdConsumerManage resets a group's offset or takes a consumer offline or
// online; CmdBrokerStats reports subjects, groups, consumers and backlog;
// CmdDeadLetters lists and inspects a group's dead letters.
//
// # Lifecycle
//
// New opens (and recovers) the store; Start serves; Close stops taking
// messages, answers waiting pulls, finishes requests in flight, then closes
// the store, which flushes and writes a checkpoint. Goroutines: livenessLoop
// (owned by the Broker), the actor workers (pkg/actor), the store's and the
// servers' own.
package realtime
