// Package delay is the delay server: the master of one delay group. It keeps
// delayed and scheduled messages in a delay/store (a durable message log,
// hourly schedule files, a 500 ms time wheel loaded 30 minutes ahead) and
// forwards each one to a realtime broker group of its subject when it falls
// due — never before.
//
// # Receive
//
// Producers send messages due 500 ms or more ahead here (the producer
// library routes by DeliverAt). A send request's messages are appended to
// the store and acknowledged once durable (group commit under the default
// sync flush), each with its own status: a message beyond the horizon
// (default 2 years) is refused with StatusBeyondHorizon, an oversized one
// with StatusTooLarge — never reported stored when it was not.
//
// # Forward
//
// forwardLoop takes due messages from the store in batches and sends each,
// as the exact bytes the producer encoded (same id), through a producer
// (pkg producer: batching, a breaker per broker, latency-aware group choice,
// retries with back-off on another group) to a writable realtime group of
// its subject. When the realtime broker has stored it (or answers that it
// already had it: its dedupe window drops re-forwards), markLoop records it
// in the hour's dispatch log. A message not yet recorded when the server
// stops or dies is forwarded again after the restart; the realtime broker
// drops that copy.
//
// # Lifecycle
//
// New opens (and recovers) the store; Start serves and forwards; Close stops
// taking messages, lets forwards in flight finish, records them and closes
// the store. Goroutines: forwardLoop and markLoop (owned by the Server), the
// store's, the producer's and the servers' own.
package delay
