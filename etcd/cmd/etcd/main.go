// etcd, as its own main package runs it: every flag and behaviour is etcd v3.6.4's own.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
