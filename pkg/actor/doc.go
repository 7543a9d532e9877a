// Package actor runs many small actors on a fixed pool of worker goroutines
// with time slices, the scheduling model of QMQ's pull service.
//
// An Actor owns a bounded mailbox and a handler. Sending to an idle actor
// puts it at the back of the scheduler's run queue. A worker takes the actor
// at the front and calls its handler for one message after another until the
// mailbox is empty or the actor has run for a whole time slice (default
// 5 ms); then, if messages remain, the actor goes to the back of the run
// queue. An actor runs on at most one worker at a time, so its handler needs
// no locking for the actor's own state. A busy actor therefore takes turns
// with every other runnable actor instead of holding a worker: a consumer
// group with 64 consumers flooding pulls gets one turn per round, as does a
// group with 2.
//
// Mailboxes are bounded: Send reports false when the mailbox is full, so the
// caller can answer "retry later" instead of queueing without limit.
//
// Goroutines: the Scheduler owns its workers (workerLoop); Close stops them
// after the run queue drains of actors that were already runnable, and waits.
package actor
