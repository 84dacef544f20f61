// Command coredns is CoreDNS's own main, built from the pinned github.com/coredns/coredns module with
// only the plugins a test cluster's DNS uses (the kubernetes plugin and its usual companions), instead
// of every plugin CoreDNS ships: the same server, a fraction of the dependencies to build.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
