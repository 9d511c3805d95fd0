package cli

import (
	"github.com/mspipe/mspipe/schemas"
	"github.com/spf13/cobra"
)

func newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of pipeline specs",
		Long: `Print the JSON Schema (2020-12) of mspipe pipeline specs.

Editors that speak yaml-language-server validate and complete a spec that
starts with a modeline pointing at the schema:

  # yaml-language-server: $schema=./pipeline.schema.json

The schema checks structure only; ` + "`mspipe validate`" + ` also checks expressions,
needs cycles, stage inputs against each stage's own schema, and rank tables.`,
		Example: `  mspipe schema > pipeline.schema.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(schemas.Pipeline)
			return err
		},
	}
}
