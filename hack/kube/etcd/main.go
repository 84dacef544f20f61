// Command etcd is etcd's own server main, built from the pinned go.etcd.io/etcd/server/v3 module.
// etcd's go.mod carries replace directives, so `go install` of it fails; a module that imports its
// main logic builds it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
