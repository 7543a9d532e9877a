package netlab

import "errors"

var (
	// ErrUnsupported: this machine refuses network namespaces, veth pairs or
	// bridges (not root, no ip, a kernel without them). Tests skip on it.
	ErrUnsupported = errors.New("netlab: network namespaces not available")
	// ErrUnknownHost: a host name the lab does not have.
	ErrUnknownHost = errors.New("netlab: unknown host")
	// ErrClosed: the lab was closed.
	ErrClosed = errors.New("netlab: lab closed")
)
