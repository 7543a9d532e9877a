// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain),
// built by scripts/deploy/image.sh into the FROM-scratch image so the
// compose file's external etcd cluster needs no image pulled. It takes
// etcd's flags and ETCD_* environment variables unchanged. A real
// deployment may run any etcd 3.5+ cluster instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
