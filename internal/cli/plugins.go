package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/mspipe/mspipe/plugins"
	"github.com/spf13/cobra"
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
			for _, name := range env.registry.Names() {
				d := env.describe(cmd.Context(), name)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, d.desc.Version, plugins.OriginBuiltin, d.desc.Description)
			}
			for _, name := range env.Names() {
				if d, ok := env.declared[name]; ok {
					fmt.Fprintf(tw, "%s\t-\tbuilt-in, not implemented yet\t%s\n", name, d.Description)
				}
			}
			for _, found := range discoverBinaries(env.resolver.SearchPath) {
				d := env.describe(cmd.Context(), found.path)
				if d.err != nil {
					fmt.Fprintf(tw, "%s\t?\t%s\tcannot be used: %v\n", found.name, found.path, d.err)
					continue
				}
				origin := found.path
				if found.shadowedBy != "" {
					origin += " (shadowed by " + found.shadowedBy + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.desc.Name, d.desc.Version, origin, d.desc.Description)
			}
			return tw.Flush()
		},
	}
}

type foundBinary struct {
	name, path, shadowedBy string
}

// discoverBinaries lists the mspipe-stage-* executables along the search
// path, in search order, noting which are shadowed by an earlier one.
func discoverBinaries(path []plugins.SearchDir) []foundBinary {
	var out []foundBinary
	first := map[string]string{}
	for _, d := range path {
		entries, err := os.ReadDir(d.Dir)
		if err != nil {
			continue
		}
		var names []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), plugins.BinaryPrefix) && !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			abs, err := filepath.Abs(filepath.Join(d.Dir, n))
			if err != nil {
				continue
			}
			info, err := os.Stat(abs)
			if err != nil || info.Mode().Perm()&0o111 == 0 {
				continue
			}
			fb := foundBinary{name: strings.TrimPrefix(n, plugins.BinaryPrefix), path: abs, shadowedBy: first[n]}
			if first[n] == "" {
				first[n] = abs
			}
			out = append(out, fb)
		}
	}
	return out
}
