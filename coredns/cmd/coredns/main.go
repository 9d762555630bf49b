// CoreDNS with the plugins a test cluster's DNS needs and no others: the Kubernetes plugin
// (cluster.local from the API server), forwarding of every other name, a cache, errors and logs,
// health and readiness endpoints, and bind (listen on one address). Upstream's main imports
// every plugin, whose dependencies (clouds' SDKs) would multiply the build; this one builds only
// what these serve.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
