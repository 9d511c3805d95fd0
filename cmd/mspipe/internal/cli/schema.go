package cli

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mspipe/mspipe/stages/builtin"
	"github.com/spf13/cobra"
)

func newSchemaCmd() *cobra.Command {
	var stage string
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of pipeline specs, or of one stage's inputs",
		Long: `Print the JSON Schema (2020-12) of mspipe pipeline specs: the spec's own keys
and, for each built-in stage, the inputs its with block takes (names, types,
enums, descriptions and defaults, as the stage declares them); any other
uses (a plugin binary) takes any with object. schemas/pipeline.schema.json
in the repository is this output.

Editors that speak yaml-language-server validate and complete a spec that
starts with a modeline pointing at the schema:

  # yaml-language-server: $schema=./pipeline.schema.json

With --stage NAME, print the schema of that stage's with block alone: a
built-in, or a plugin binary found as ` + "`mspipe plugins`" + ` finds it (it is started
to ask).

The schema cannot check expressions, needs cycles, a plugin stage's inputs
or rank tables: ` + "`mspipe validate`" + ` checks those too.`,
		Example: `  mspipe schema > pipeline.schema.json
  mspipe schema --stage npu/train`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stage != "" {
				return printStageSchema(cmd, stage)
			}
			doc, err := builtin.PipelineSchema(cmd.Context())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(doc)
			return err
		},
	}
	cmd.Flags().StringVar(&stage, "stage", "", "print the input schema of this stage (as in uses:) instead")
	return cmd
}

// printStageSchema prints the JSON Schema of the with block of the stage
// uses names, indented.
func printStageSchema(cmd *cobra.Command, uses string) error {
	env, err := newStageEnv(".")
	if err != nil {
		return err
	}
	defer env.Close() // a plugin binary started to describe itself
	info, err := env.Stage(uses)
	if err != nil {
		return usageErr(fmt.Errorf("--stage %s: %w", uses, err))
	}
	if info.WithSchema == nil {
		return usageErr(fmt.Errorf("--stage %s: the stage declares no schema for with (it takes any object)", uses))
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, info.WithSchema, "", "  "); err != nil {
		return fmt.Errorf("--stage %s: the stage declares a schema that is not JSON: %w", uses, err)
	}
	buf.WriteByte('\n')
	_, err = cmd.OutOrStdout().Write(buf.Bytes())
	return err
}
