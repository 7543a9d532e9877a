// Package tlsconfig builds the *tls.Config of QMQ-Go's servers and clients
// from PEM files, and re-reads those files when they change, so a
// certificate or a CA bundle is replaced without a restart. It imports
// nothing of the project.
//
// # Files
//
// Files names three PEM files; every one is optional, but Cert and Key go
// together:
//
//	CA    the certificates that sign this cluster's certificates: a server
//	      verifies client certificates against it, a client verifies the
//	      server's certificate against it
//	Cert  this side's certificate (with intermediates after it)
//	Key   its private key; the file must be readable by its owner only
//	      (mode 0600 or stricter)
//
// A server needs Cert and Key; with CA it also verifies the client
// certificates it is given (tls.VerifyClientCertIfGiven, so a client may
// instead authenticate with a secret over TLS), or, when asked, requires
// one (tls.RequireAndVerifyClientCert). A client needs CA to verify a
// server whose certificate a public CA did not sign (without CA it uses
// the system's roots); with Cert and Key it presents a client certificate
// whenever the server asks for one.
//
// Both sides accept TLS 1.2 and 1.3 and prefer 1.3 (Go negotiates the
// newest version both sides have).
//
// # Reload
//
// The files are checked at most once a second, from the handshakes
// themselves: a server from GetConfigForClient, a client from
// GetClientCertificate and VerifyConnection. A check compares each file's
// modification time and size with those of the files in use; when one
// differs, all of them are read again, and the next handshake uses the new
// certificate and pool. Connections already open keep theirs. A file that
// cannot be read or parsed (half written, a key that does not match its
// certificate) leaves the old material in use; OnReloadError's function is
// told, once per error, and the files are read again when they change
// again. Replace files by writing a temporary file and renaming it
// over the old one, so no handshake sees half a file; write the key before
// the certificate when both change.
//
// # Verification
//
// A server verifies client certificates the standard way (ClientCAs, the
// chains in tls.ConnectionState.VerifiedChains). A client built with a CA
// file verifies the server itself in VerifyConnection, against the pool
// read last (a static RootCAs could not follow the file): the chain must
// lead to the CA, be valid now, allow server authentication, and name the
// server. The name is Client's serverName when given, else the connection
// state's ServerName, which net/http, crypto/tls's Dial and pkg/transport
// set from the address dialled. Go leaves that empty when the address is an
// IP address; pkg/transport fills it in with the IP, but other users of the
// config (an HTTP client, etcd's client) dialling IP addresses must pass
// serverName (a certificate may carry a service name that every server of
// a kind shares). A connection with no name to check is refused.
//
// # Flags
//
// Files.AddFlags binds the three files to flags under a prefix; servers use
// "tls-" (--tls-ca, --tls-cert, --tls-key) and YAML keys tls: {ca, cert,
// key}. A server's certificate serves its listeners, and, when it carries a
// qmq:// identity (scripts/certs -node), proves who the server is on the
// connections it makes itself (to the meta server, to its master).
package tlsconfig
