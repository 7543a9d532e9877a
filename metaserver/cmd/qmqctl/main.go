// Command qmqctl administers a QMQ-Go cluster through a meta server's admin
// API; `qmqctl --help` lists the commands.
package main

import (
	"os"

	"github.com/qmq-go/qmq/metaserver/ctl"
)

func main() {
	os.Exit(ctl.Main(os.Args[1:], os.Stdout, os.Stderr))
}
