package cli

import (
	"fmt"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/spf13/cobra"
)

func newGraphCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "graph FILE",
		Short: "Draw the stage graph (Mermaid or Graphviz dot)",
		Long: `Print the stage graph of a spec: one node per stage, an edge per need
(dashed when the stage has an if). Mermaid renders in GitHub Markdown; dot
renders with Graphviz (dot -Tsvg).`,
		Example: `  mspipe graph examples/two-stage-training.yaml
  mspipe graph examples/two-stage-training.yaml --format dot | dot -Tsvg > graph.svg`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "mermaid" && format != "dot" {
				return usageErr(fmt.Errorf("--format: unknown format %q (mermaid or dot)", format))
			}
			// Drawing needs no plugin: start only pinned ones, as validate does.
			ls, err := loadSpecFor(cmd.ErrOrStderr(), args[0], nil, catalog.ExecPinned)
			if err != nil {
				return err
			}
			g, err := pipeline.NewGraph(ls.p)
			if err != nil {
				return err
			}
			if format == "dot" {
				return g.WriteDot(cmd.OutOrStdout(), ls.p, nil)
			}
			return g.WriteMermaid(cmd.OutOrStdout(), ls.p, nil)
		},
	}
	cmd.Flags().StringVar(&format, "format", "mermaid", "mermaid or dot")
	return cmd
}
