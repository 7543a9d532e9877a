package protocol

import "fmt"

// DecodePullResponseInto is DecodePullResponse appending to dst[:0], so a
// client that pulls in a loop reuses one slice of entries and allocates
// nothing per pull. The layout is drawn in pull.go:
//
//	count u32 | count × (pull seq u64 | consume seq u64 | message len u32 | message)
//
// The entries alias body. On error it returns dst[:0] and the error.
func DecodePullResponseInto(dst []PulledMessage, body []byte) ([]PulledMessage, error) {
	out := dst[:0]
	r := reader{b: body}
	n := r.u32()
	if r.err == nil && uint64(n)*PullItemHeaderSize > uint64(len(body)) {
		return out, fmt.Errorf("%w: pull response claims %d messages in %d bytes", ErrTruncated, n, len(body))
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		m := PulledMessage{PullSeq: r.u64(), ConsumeSeq: r.u64()}
		m.Message = r.bytes32()
		out = append(out, m)
	}
	if err := r.done(); err != nil {
		clear(out)
		return dst[:0], fmt.Errorf("%w: pull response", err)
	}
	return out, nil
}
