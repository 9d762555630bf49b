//go:build kubelet

// Command kube-scheduler is the upstream kube-scheduler, unchanged: the same main as
// k8s.io/kubernetes/cmd/kube-scheduler, built from the release pinned in go.mod. It places the
// pods that name no node (a Spark driver's, its executors') on the test node
// (operator/distributary/devtools/scheduler.py).
//
// Behind the build tag `kubelet`, with the kubelet: the control plane's own build leaves it out.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
