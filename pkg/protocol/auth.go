package protocol

import "fmt"

// CmdAuth proves who a connection is: it carries an identity's name and
// secret, and every later request on the connection runs as that identity.
// Every server serves it (see pkg/netserver).
const CmdAuth Command = 2

func init() { commandNames[CmdAuth] = "auth" }

// Auth bodies (CmdAuth), big-endian; s8 is a u8 length and that many bytes,
// s16 a u16 length and that many bytes:
//
//	AuthRequest    name s8 | secret s16
//	AuthResponse   name s8 | kind u8 | group s8
//
// A client sends AuthRequest as the first request of a connection, before
// any other, and waits for its answer. The server answers StatusOK with the
// identity it took the connection for (kind: 1 application, 2 broker,
// 3 admin; group: a broker's group, empty otherwise), or
// StatusUnauthenticated — the same status for an unknown name and a wrong
// secret, so the answer does not say which names exist. A connection that
// authenticated by its TLS client certificate needs no AuthRequest; one
// that sends it anyway is taken for the identity it names, if the secret
// is right. Secrets travel in the clear inside the frame, so a server that
// requires authentication takes AuthRequest only over TLS unless it runs
// insecure (loopback tests, --insecure).
//
// A second AuthRequest on a connection replaces its identity when it
// succeeds and leaves it unchanged when it fails.

// MaxAuthSecret is the longest secret an AuthRequest carries.
const MaxAuthSecret = 1<<16 - 1

// AuthRequest names an identity and carries its secret.
type AuthRequest struct {
	Name   string
	Secret string
}

// AuthResponse is who the server took the connection for.
type AuthResponse struct {
	Name  string
	Kind  uint8 // 1 application, 2 broker, 3 admin (pkg/auth.Kind)
	Group string
}

// AppendAuthRequest appends the body of q. It fails when the name is empty
// or over 255 bytes, or the secret over MaxAuthSecret bytes.
func AppendAuthRequest(dst []byte, q *AuthRequest) ([]byte, error) {
	if q.Name == "" || len(q.Name) > 255 {
		return dst, fmt.Errorf("%w: auth name of %d bytes (1 to 255)", ErrInvalid, len(q.Name))
	}
	if len(q.Secret) > MaxAuthSecret {
		return dst, fmt.Errorf("%w: auth secret of %d bytes (at most %d)", ErrInvalid, len(q.Secret), MaxAuthSecret)
	}
	dst = append(dst, byte(len(q.Name)))
	dst = append(dst, q.Name...)
	dst = append(dst, byte(len(q.Secret)>>8), byte(len(q.Secret)))
	return append(dst, q.Secret...), nil
}

// DecodeAuthRequest decodes an AuthRequest body.
func DecodeAuthRequest(b []byte) (AuthRequest, error) {
	r := reader{b: b}
	q := AuthRequest{Name: string(r.bytes8()), Secret: string(r.bytes16())}
	if err := r.done(); err != nil {
		return AuthRequest{}, err
	}
	if q.Name == "" {
		return AuthRequest{}, fmt.Errorf("%w: auth request without a name", ErrInvalid)
	}
	return q, nil
}

// AppendAuthResponse appends the body of a. Name and group longer than 255
// bytes are cut (names are at most 255 bytes where they are made).
func AppendAuthResponse(dst []byte, a *AuthResponse) []byte {
	name, group := a.Name, a.Group
	if len(name) > 255 {
		name = name[:255]
	}
	if len(group) > 255 {
		group = group[:255]
	}
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	dst = append(dst, a.Kind, byte(len(group)))
	return append(dst, group...)
}

// DecodeAuthResponse decodes an AuthResponse body.
func DecodeAuthResponse(b []byte) (AuthResponse, error) {
	r := reader{b: b}
	a := AuthResponse{Name: string(r.bytes8()), Kind: r.u8(), Group: string(r.bytes8())}
	if err := r.done(); err != nil {
		return AuthResponse{}, err
	}
	return a, nil
}
