package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// newPluginServeCmd is the hidden `mspipe __stage NAME`: mspipe re-executes
// itself with it to run a built-in stage as a plugin process, like any
// external plugin.
func newPluginServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:    host.ServeCommand + " NAME",
		Short:  "Serve a built-in stage as a plugin (mspipe runs this itself)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := builtinStages()
			if err != nil {
				return err
			}
			info, ok := reg.Lookup(args[0])
			if !ok {
				return usageErr(fmt.Errorf("%s: no built-in stage %q (built-ins: %s)",
					host.ServeCommand, args[0], strings.Join(reg.Names(), ", ")))
			}
			err = sdk.ServeContext(cmd.Context(), info.New())
			if errors.Is(err, sdk.ErrNotLaunched) {
				fmt.Fprintf(cmd.ErrOrStderr(), "mspipe %s %s serves the built-in stage %q to mspipe itself; "+
					"it is not meant to be run by hand.\nUse the stage in a pipeline with \"uses: %s\" and run: mspipe run pipeline.yaml\n",
					host.ServeCommand, info.Name, info.Name, info.Name)
				return failed()
			}
			return err
		},
	}
}
