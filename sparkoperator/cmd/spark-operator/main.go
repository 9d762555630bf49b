// Command spark-operator is the Kubeflow Spark operator, unchanged: the same main as
// github.com/kubeflow/spark-operator/v2/cmd/operator (controller, webhook and version commands),
// built from the release pinned in go.mod. The tests run `spark-operator controller start`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kubeflow/spark-operator/v2/cmd/operator/controller"
	"github.com/kubeflow/spark-operator/v2/cmd/operator/version"
	"github.com/kubeflow/spark-operator/v2/cmd/operator/webhook"
)

func main() {
	command := &cobra.Command{
		Use:   "spark-operator",
		Short: "Spark operator",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	command.AddCommand(controller.NewCommand(), webhook.NewCommand(), version.NewCommand())
	if err := command.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}
