// Command etcd is etcd's server, at the version Kubernetes' own module pins (go.etcd.io/etcd/server/v3 in go.mod):
// the same main as etcd's repository, whose root module cannot be required from outside it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
