package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/mspipe/mspipe/plugins/host"
)

func newPluginsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "plugins",
		Short: "List the stages mspipe can run: built-ins and plugin binaries it finds",
		Long: `List every stage a spec can use with uses:, with its version and origin.

Built-in stages are served by the mspipe binary itself. Plugin binaries are
executables named mspipe-stage-<name>, found in ./plugins, in each directory
of $MSPIPE_PLUGIN_PATH, then in the user config dir (~/.config/mspipe/plugins);
the first found wins, and a built-in wins over all. Each binary is started
once to ask its name and version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := newStageEnv(".")
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STAGE\tVERSION\tORIGIN\tDESCRIPTION")
			for _, l := range env.List(cmd.Context()) {
				switch {
				case l.Kind == catalog.KindBuiltin:
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Name, l.Version, host.OriginBuiltin, l.Description)
				case l.Kind == catalog.KindDeclared:
					fmt.Fprintf(tw, "%s\t-\tbuilt-in, not implemented yet\t%s\n", l.Name, l.Description)
				case l.Err != nil:
					fmt.Fprintf(tw, "%s\t?\t%s\tcannot be used: %v\n", l.Name, l.Path, l.Err)
				default:
					origin := l.Path
					if l.ShadowedBy != "" {
						origin += " (shadowed by " + l.ShadowedBy + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Name, l.Version, origin, l.Description)
				}
			}
			return tw.Flush()
		},
	}
}
