// Package busypoll waits for a socket to become readable by polling it
// without blocking (poll(2), timeout 0) for a short while, instead of going
// to sleep in the kernel and being woken when bytes come. On a VM the
// sleep and wake-up are a large part of a loopback round trip, so a side
// that expects an answer within microseconds (a server after answering a
// client with one request in flight, a client waiting for that answer)
// spins for it. Budget stops the spinning of a peer whose bytes keep
// coming too late (one far away, or one that sends rarely): after
// GiveUp misses in a row it spins once every Probe chances, so such a peer
// costs a few spins, not one per request.
package busypoll
