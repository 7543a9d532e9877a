// Package auth is QMQ-Go's model of who may do what: identities, their
// secrets (stored hashed), their grants, and the policy snapshot a server
// checks requests against. It imports nothing of the project and nothing
// of the network, so the meta server (which stores policies in etcd), the
// brokers (which cache them) and the clients (which only present
// credentials) share it.
//
// # Identities
//
// Every connection runs as one Principal, proven either by a TLS client
// certificate the server's CA signed or by a secret sent over TLS
// (protocol.CmdAuth). An identity has a Kind:
//
//   - KindApp: a producer or consumer application. It may publish to the
//     subjects its Grants.Publish patterns match and consume the subjects
//     its Grants.Consume patterns match, as the consumer groups its
//     Grants.Groups patterns match (the groups it owns). The system subjects
//     of a (subject, group) — %RETRY%<subject>%<group> and
//     %DEAD%<subject>%<group> — follow the consume right: an identity that
//     may consume the subject as the group may publish and consume them.
//   - KindBroker: a realtime or delay broker of one group (Entry.Group). It
//     may register as that group with the meta servers, copy from that
//     group's master, and publish any subject (a delay server forwards
//     every subject it holds).
//   - KindAdmin: an operator, or the meta server relaying an operator's
//     request to brokers. Grants.Admin says how much: AdminRead reads
//     cluster state, AdminWrite also changes it (routes, readonly,
//     switchover, offset reset, consumer offline/online, dead-letter
//     re-drive and purge, identities) and reads message bodies. An
//     AdminRead identity reads bodies only with Grants.ReadBodies.
//
// A certificate names its identity in a URI SAN qmq://<kind>/<name>, kind
// being app, broker or admin (for a broker the name is its group). Such an
// identity needs no policy entry: a broker or an admin certificate carries
// its kind's rights (admin: AdminWrite); an app certificate carries the
// grants of the policy entry of the same name, none without one. An entry
// of the same name and kind overrides the certificate's implied grants, and
// a disabled entry refuses the certificate.
//
// # Patterns
//
// Grants name subjects and groups by pattern: "*" matches everything,
// a pattern ending in "*" matches every name with the part before it as a
// prefix ("order.*" matches "order.created", "orders*" matches
// "orders-eu"), and any other pattern only itself. Patterns use the
// characters of subjects ([A-Za-z0-9._-]) and one trailing "*".
//
// # Secrets
//
// A secret is stored as PBKDF2-SHA256 (SecretIterations rounds, a 16-byte
// random salt, a 32-byte key). Generated secrets are 32 random bytes in
// base64url: with that much entropy the slow hash guards the stored form
// against a leak, not against guessing. An Authority remembers the SHA-256
// of secrets it verified (per identity and policy version), so a client
// reconnecting pays the slow hash once. Credentials are written
// "name:secret" (Credentials.String); ParseCredentials reads them.
// Secrets live in files only their owner may read: ReadSecretFile refuses
// a file with any group or other permission bit, WriteSecretFile writes
// 0600 (temp, fsync, rename). HashSecret takes secrets of MinSecretLen
// characters or more; HashSecretAnyLength exists for a bootstrap secret
// given in code (tests).
//
// # Policies
//
// A Policy is an immutable, versioned snapshot of every identity. The meta
// server builds it from etcd (the version is the etcd revision it was
// read at) and hands it to brokers, which keep the newest in an Authority
// (one atomic pointer) and on disk, so an authorized client is never locked
// out by a meta outage. Authority.Update takes newer versions only;
// Authority.Replace takes any (a broker that found every meta server on an
// older version for long: an etcd rebuilt from scratch). Open is the Principal of a server that does not
// require authentication: it may do everything.
package auth
