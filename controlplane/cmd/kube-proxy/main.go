//go:build kubelet

// Command kube-proxy is the upstream kube-proxy, unchanged: the same main as
// k8s.io/kubernetes/cmd/kube-proxy, built from the release pinned in go.mod. It routes the test
// node's traffic to Services' cluster IPs (operator/distributary/devtools/node.py).
//
// Behind the build tag `kubelet`, with the kubelet: the control plane's own build leaves it out.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
