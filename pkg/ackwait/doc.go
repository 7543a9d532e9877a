// Package ackwait holds what a replicating master keeps while it waits for
// its slave: the send replies waiting until the slave's acknowledged
// position reaches the offset each needs (Waiters, ordered by that offset),
// and dated samples of the master's end the slave has not reached yet
// (Lag), which give the age of the oldest unacknowledged bytes.
//
// Neither type locks: the owner guards them with its own mutex, the one
// that also guards its closed and readonly state, so a reply can be queued,
// completed or failed consistently with them. Callbacks are returned, not
// run, so the owner runs them after unlocking.
package ackwait
