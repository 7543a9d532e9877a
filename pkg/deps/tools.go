//go:build tools

// Package deps pins modules that packages still being written will import.
package deps

import (
	_ "github.com/panjf2000/gnet/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/sony/gobreaker/v2"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "gopkg.in/yaml.v3"
)
