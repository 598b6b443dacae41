// Command coredns is CoreDNS with its default plugins (coremain), at the version go.mod pins: the cluster's DNS
// (scripts/install-cluster runs it on the node, serving cluster.local from the API).
package main

import (
	_ "github.com/coredns/coredns/core/plugin" // every plugin of the standard build
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
