// Package secure holds what every QMQ-Go broker (realtime and delay)
// needs to run on a real network, in one Options struct its binary binds
// to flags: TLS files for its listeners and its own connections, whether
// its TCP port requires an identity, the credentials it presents to other
// servers, the connection bounds of its TCP port, and the exposure rule
// (pkg/exposure). Build turns the options into what the broker wires in:
// the listener's and the clients' *tls.Config, the credentials, the
// netserver options, and an HTTP authorization hook for its ops server.
//
// # One set of files
//
// A broker has one certificate (Options.TLS.Cert and Key, as
// scripts/certs -node makes: server and client use, the broker's identity
// qmq://broker/<group> as URI SAN) and one CA file. The certificate serves
// its TCP and HTTP listeners and is presented, as a client certificate, on
// its own connections to the meta servers, to its master (a slave) and to
// realtime brokers (a delay server forwarding), which proves its group
// without a secret. The CA verifies every server it connects to and every
// client certificate it is shown. A broker may instead (or as well) prove
// itself with a secret: Options.Credentials from QMQ_CREDENTIALS or
// --credentials-file, never from the command line.
//
// # Identities on the TCP port
//
// The broker's policy (every identity, its hashed secret and grants) comes
// from the meta servers (pkg/metaclient PolicyCache, kept in the data
// directory so a restart during a meta outage still knows everyone). With
// Options.RequireAuth every connection must prove an identity before any
// command but ping; without it, a connection that names none runs as
// auth.Open (a trusted loopback cluster). Commands check the identity:
// see each broker's doc.go.
//
// # HTTP
//
// The ops server (/metrics, /healthz, /readyz open; PUT /loglevel needs
// admin write, /debug/pprof admin read) takes a bearer credential
// ("name:secret") or a verified client certificate (Authorize).
package secure
