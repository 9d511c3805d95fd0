package cli

import (
	"github.com/mspipe/mspipe/npu/job"
	"github.com/spf13/cobra"
)

// newWorkerCmd is the hidden `mspipe __npu-worker CONFIG`: the process of
// one simulated device, started by the npu/train stage with the seeds'
// DEVICE_ID, RANK_ID, RANK_SIZE and RANK_TABLE_FILE.
func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    job.Command + " CONFIG",
		Short:  "Run one simulated device of an npu/train stage (mspipe runs this itself)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return job.Run(cmd.Context(), args[0])
		},
	}
}
