// Package metaclient is how producers, consumers and brokers talk to the
// meta servers.
//
// # Routes
//
// A Client answers Lookup(ctx, clientType, subject, group) from a cache. The
// first lookup of a key asks a meta server; after that a refresh loop asks
// again every refresh interval (default 5 s), and Refresh asks early (a
// producer calls it when a broker says "readonly" or "not routed", or its
// connection fails). Meta server addresses are tried in turn, starting with
// the last one that answered, so one dead meta server costs one failed
// request, not an outage. A refresh that fails keeps the cached route: while
// every meta server (or etcd behind them) is down, clients go on with the
// routes they have. A response whose version (the meta server's etcd
// revision) is older than the cached one is ignored for three refresh
// intervals, so a lagging meta server cannot undo a newer answer, while an
// etcd rebuilt from scratch (revisions start again at 1) cannot pin clients
// to old routes for longer than that.
//
// Each cached route (up to MaxWatchedRoutes) is also watched: a long-polling
// lookup that the meta server answers as soon as the route's answer changes
// (a failover, a group turning readonly) or after WithWatch's wait (default
// 10 s), so clients follow a change within a round trip rather than a
// refresh interval.
//
// NewStatic returns a Client with fixed routes and no meta server, for tests
// and one-off tools.
//
// # Consumers
//
// RegisterConsumer keeps a consumer registered (CmdClientHeartbeat every
// third of the TTL the meta server returns) so the console lists it, and
// reports whether an admin took it offline.
//
// # Brokers
//
// Register (registrar.go) registers a broker and heartbeats it every third of
// the lease TTL, carrying its state, load and (a master's) write state,
// trying every meta server in turn; Poke heartbeats at once (the state
// changed); Close unregisters it at once. A registration reports its group's
// eligible set (Set) and a master changes it with SetEligible; a master
// registration with Broker.TakeoverEpoch asks for a takeover. The role loop
// that drives all this is pkg/failover.
package metaclient
