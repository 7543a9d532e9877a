// Package devetcd starts an embedded single-node etcd: the meta server
// binary's default store when no --etcd-endpoints are given, and the etcd of
// tests and benchmarks.
//
// It is the only package (with the meta server binary and tests) that links
// go.etcd.io/etcd/server/v3, which adds about 14 MB to a binary and slows
// builds; libraries talk to etcd through clientv3 only.
//
// Port 0 works for both URLs (the default): Endpoints reports the real client
// address once Start returns. The member then advertises :0, so clients must
// not turn on endpoint auto-sync. A member listening on all interfaces
// (0.0.0.0, [::]) needs ClientAdvertise and PeerAdvertise, the addresses it
// tells others (Endpoints returns ClientAdvertise).
//
// TLS: Options.ClientTLS and PeerTLS serve the client and peer ports over
// TLS with etcd's own client-certificate auth (ClientCertAuth: only
// clients whose certificate the trusted CA signed are served). etcd reads
// the files at every handshake, so certificates are replaced without a
// restart. The data directory is made (or narrowed to) 0700; etcd writes
// its files 0600.
package devetcd
