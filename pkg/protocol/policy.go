package protocol

import (
	"encoding/binary"
	"fmt"
	"time"
)

// CmdPolicy asks a meta server for the newest policy (every identity with
// its grants and hashed secret): brokers keep it to authenticate their
// clients. Only brokers and admins may ask (the policy holds secret
// hashes); anyone else is refused with StatusForbidden.
const CmdPolicy Command = 40

func init() { commandNames[CmdPolicy] = "policy" }

// Policy bodies (CmdPolicy), big-endian:
//
//	PolicyRequest    version u64 | wait ms u32
//	PolicyResponse   version u64 | policy len u32 | policy
//
//	 0               8          12
//	+---------------+----------+
//	|    version    |  wait ms |                  request
//	+---------------+----------+
//	 0               8          12             12+len
//	+---------------+----------+----------------+
//	|    version    |   len    |  policy bytes  |  response
//	+---------------+----------+----------------+
//
// version in a request is the policy version the broker holds (0: none).
// The meta server answers at once with its newest policy when that is newer
// than version; otherwise it holds the request up to wait (a long poll,
// capped by the server) and answers as soon as a newer policy exists, or
// with its own version and no policy bytes when wait ends. A response's
// policy bytes are the policy's JSON encoding (pkg/auth.ParsePolicy reads
// it), at most MaxPolicySize bytes; empty means "nothing newer than what
// you have" (version then says which version the server is at, which may
// be older than the broker's when that server lags).

// MaxPolicySize bounds an encoded policy (about 25,000 identities).
const MaxPolicySize = 8 << 20

// MaxPolicyWait is the longest wait a PolicyRequest can ask for.
const MaxPolicyWait = time.Duration(1<<32-1) * time.Millisecond

// PolicyRequest names the policy version a broker holds.
type PolicyRequest struct {
	Version uint64
	Wait    time.Duration // how long the server may hold the request
}

// PolicyResponse is the server's policy version and, when newer than the
// request's, the encoded policy.
type PolicyResponse struct {
	Version uint64
	Policy  []byte // empty: nothing newer
}

// AppendPolicyRequest appends the body of q (a negative wait is 0).
func AppendPolicyRequest(dst []byte, q *PolicyRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Version)
	return binary.BigEndian.AppendUint32(dst, durationMillis(q.Wait))
}

// DecodePolicyRequest decodes a policy request body.
func DecodePolicyRequest(b []byte) (PolicyRequest, error) {
	r := reader{b: b}
	q := PolicyRequest{Version: r.u64(), Wait: time.Duration(r.u32()) * time.Millisecond}
	if err := r.done(); err != nil {
		return PolicyRequest{}, fmt.Errorf("%w: policy request", err)
	}
	return q, nil
}

// AppendPolicyResponse appends the body of p. It fails when the policy is
// over MaxPolicySize.
func AppendPolicyResponse(dst []byte, p *PolicyResponse) ([]byte, error) {
	if len(p.Policy) > MaxPolicySize {
		return dst, fmt.Errorf("%w: policy of %d bytes (at most %d)", ErrInvalid, len(p.Policy), MaxPolicySize)
	}
	dst = binary.BigEndian.AppendUint64(dst, p.Version)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Policy)))
	return append(dst, p.Policy...), nil
}

// DecodePolicyResponse decodes a policy response body. The policy bytes
// alias b.
func DecodePolicyResponse(b []byte) (PolicyResponse, error) {
	r := reader{b: b}
	p := PolicyResponse{Version: r.u64()}
	n := r.u32()
	if r.err == nil && n > MaxPolicySize {
		return PolicyResponse{}, fmt.Errorf("%w: policy response of %d bytes (at most %d)", ErrInvalid, n, MaxPolicySize)
	}
	if n > 0 {
		p.Policy = r.bytes(int(n))
	}
	if err := r.done(); err != nil {
		return PolicyResponse{}, fmt.Errorf("%w: policy response", err)
	}
	return p, nil
}
