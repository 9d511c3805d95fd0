package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/parallel"
)

func newCkptStrategyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "strategy",
		Short: "Work with parallel strategy files (strategy_ckpt_save_file)",
	}
	cmd.AddCommand(newCkptStrategyMergeCmd())
	return cmd
}

func newCkptStrategyMergeCmd() *cobra.Command {
	var out, format string
	cmd := &cobra.Command{
		Use:   "merge DIR | FILE... -o MERGED",
		Short: "Merge the per-stage strategy files of a pipeline-parallel job into one",
		Long: `Merge the strategy files a pipeline-parallel job writes (one per stage, or
one per rank: every rank writes its stage's) into one file holding every
stage's operators, each with its stage, and every stage's parameter layouts:
what MindSpore's merge_pipeline_strategys(src_strategy_dirs,
dst_strategy_file) does. Give the directory holding the files (every regular,
non-hidden file in it is read; subdirectories are not), or the files
themselves; protobuf and JSON files may be mixed.

Each file belongs to the stage its current_stage names. Files of the same
stage must be identical; the stages must be 0 to K-1, none missing, all on
the same number of devices; a parameter two stages share must have the same
layout in both. Anything else is refused with the files at fault named, and
nothing is written.

The merged file is written atomically, in the protobuf form unless MERGED
ends in .json or --format json is given; an existing MERGED that is not a
regular file is refused, and so is a MERGED inside an input directory (a
later merge of that directory would read it).

The other checkpoint commands (inspect, merge, reshard --strategy and
--target-strategy) and the ckpt/integrate and ckpt/reshard stages read such
a directory, or a set's strategy/ directory, and merge it in memory; a
pipeline target (reshard --target-strategy) needs the per-stage files, since
a merged file does not say which stage holds each parameter.

Exit status: 0 merged, 1 the files conflict or are not strategy files, 2
usage error or a path that cannot be read or written.`,
		Example: `  mspipe ckpt strategy merge runs/<run-id>/stages/train/strategy -o merged.ckpt
  mspipe ckpt strategy merge stage0.ckpt stage1.ckpt -o merged.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageErr(fmt.Errorf("-o MERGED: say where the merged strategy file goes"))
			}
			var f parallel.StrategyFormat
			switch format {
			case "":
				f = parallel.FormatProto
				if strings.EqualFold(filepath.Ext(out), ".json") {
					f = parallel.FormatJSON
				}
			case "proto", "protobuf":
				f = parallel.FormatProto
			case "json":
				f = parallel.FormatJSON
			default:
				return usageErr(fmt.Errorf("--format: unknown format %q (proto or json)", format))
			}
			if err := atomicfile.CheckTarget(out); err != nil {
				return usageErr(fmt.Errorf("write %s: %w", out, err))
			}
			files, err := parallel.StrategyPaths(args...)
			if err != nil {
				return engineErr(err)
			}
			if err := outputOutsideInputs(out, args, files); err != nil {
				return usageErr(err)
			}
			merged, err := parallel.MergeStrategyFiles(files...)
			if err != nil {
				return engineErr(err)
			}
			if err := parallel.WriteStrategyFile(out, merged, f); err != nil {
				return engineErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "merged %d strategy files: %d stages, %d operators, %d parameter layouts on %d devices per stage -> %s (%s)\n",
				len(files), len(merged.Stages()), len(merged.Operators), len(merged.Layouts), merged.Devices(), out, f)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the merged strategy file to write")
	cmd.Flags().StringVar(&format, "format", "", "proto or json (default: json when MERGED ends in .json, else proto)")
	return cmd
}

// outputOutsideInputs refuses an output that is one of the input files or
// lies in an input directory.
func outputOutsideInputs(out string, args, files []string) error {
	outInfo, statErr := os.Stat(out)
	outDir, dirErr := os.Stat(filepath.Dir(out))
	for _, f := range files {
		if info, err := os.Stat(f); statErr == nil && err == nil && os.SameFile(info, outInfo) {
			return fmt.Errorf("output %s is the input %s", out, f)
		}
	}
	for _, a := range args {
		if st, err := os.Stat(a); err == nil && st.IsDir() && dirErr == nil && os.SameFile(st, outDir) {
			return fmt.Errorf("output %s lies inside the input directory %s: a later merge of the directory would read it", out, a)
		}
	}
	return nil
}
