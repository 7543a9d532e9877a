//go:build tools

// Package peers pins the peer systems QMQ-Go is benchmarked against. They
// come from the Go module proxy and are built by build.sh into bin/; nothing
// of theirs is vendored or committed.
package peers

import (
	_ "github.com/nats-io/nats-server/v2"
	_ "github.com/nats-io/natscli/nats"
	_ "github.com/nsqio/nsq/apps/nsqd"
	_ "github.com/nsqio/nsq/bench/bench_reader"
	_ "github.com/nsqio/nsq/bench/bench_writer"
)
