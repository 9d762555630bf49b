//go:build kubelet

// Command kubelet is the upstream kubelet, unchanged: the same main as
// k8s.io/kubernetes/cmd/kubelet, built from the release pinned in go.mod. It runs the pods of the
// test node (operator/distributary/devtools/node.py) on containerd.
//
// Behind the build tag `kubelet`: the control plane's own build (`go build ./cmd/...`) leaves its
// 327 packages out, and the node builds it with `-tags=kubelet`.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
