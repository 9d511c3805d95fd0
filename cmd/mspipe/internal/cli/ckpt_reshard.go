package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/spf13/cobra"
)

// engineFlags are the flags merge, reshard and verify share.
type engineFlags struct {
	strategy  string
	prefix    string
	maxMemory string
	workers   int
	bnStats   string
	format    string
	verify    string
	crc       bool
}

func (f *engineFlags) add(cmd *cobra.Command, source bool) {
	if source {
		cmd.Flags().StringVar(&f.strategy, "strategy", "", "strategy file of the source set, or a directory of per-stage strategy files (merged; default: strategy.ckpt, strategy.json or strategy/ in the set directory; none: every tensor replicated)")
		cmd.Flags().StringVar(&f.prefix, "prefix", ckpt.DefaultPrefix, "checkpoint file prefix in a set directory")
		cmd.Flags().StringVar(&f.bnStats, "bn-stats", reshard.RuleRank0, "value of a tensor every rank holds whole but with different values (data-parallel BatchNorm statistics): rank0 or mean")
		cmd.Flags().BoolVar(&f.crc, "crc", false, "append MindSpore's crc_num trailer to every file written (save_checkpoint crc_check=True); without it the files are plain protobuf, MindSpore's default")
	}
	cmd.Flags().StringVar(&f.maxMemory, "max-memory", "512MiB", "hard cap on the tensor data held in memory at once (e.g. 64MiB, 2GiB)")
	cmd.Flags().IntVar(&f.workers, "workers", 0, "parallel reads and writes (0: one per CPU)")
	cmd.Flags().StringVar(&f.format, "format", "text", "output format: text or json")
	cmd.Flags().StringVar(&f.verify, "verify-output", reshard.VerifyOutputCRC, "how the written files are proved before the manifest: crc (re-read, size, framing and the CRC-32 computed while writing) or sha256 (also reassemble every tensor and check its content hash against the source's, as mspipe ckpt verify does)")
}

func (f *engineFlags) options() (reshard.Options, error) {
	if f.format != "text" && f.format != "json" {
		return reshard.Options{}, fmt.Errorf("--format: unknown format %q (text or json)", f.format)
	}
	mem, err := bytesize.Parse(f.maxMemory)
	if err != nil {
		return reshard.Options{}, fmt.Errorf("--max-memory: %w", err)
	}
	if f.workers < 0 {
		return reshard.Options{}, fmt.Errorf("--workers %d: want 0 or more", f.workers)
	}
	if f.bnStats != "" && f.bnStats != reshard.RuleRank0 && f.bnStats != reshard.RuleMean {
		return reshard.Options{}, fmt.Errorf("--bn-stats %q: want rank0 or mean", f.bnStats)
	}
	if f.verify != reshard.VerifyOutputCRC && f.verify != reshard.VerifyOutputSHA256 {
		return reshard.Options{}, fmt.Errorf("--verify-output %q: want crc or sha256", f.verify)
	}
	return reshard.Options{MaxMemory: mem, Workers: f.workers, ReplicatedRule: f.bnStats, VerifyCRC: true, VerifyOutput: f.verify, CRC: f.crc}, nil
}

// engineErr gives a problem with the checkpoints exit status 1 and a file
// that cannot be found or read exit status 2.
func engineErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, userfile.ErrNotRegular) || errors.Is(err, ckptset.ErrNotASet) ||
		errors.Is(err, ckptset.ErrInputOutput) || errors.Is(err, atomicfile.ErrNotEmpty) || errors.Is(err, atomicfile.ErrLocked) {
		return usageErr(err)
	}
	return &exitError{Code: ExitFailed, Err: err}
}

func newCkptMergeCmd() *cobra.Command {
	var f engineFlags
	var out string
	var plan, force bool
	cmd := &cobra.Command{
		Use:   "merge SET_DIR | RANK_FILE... (-o OUT.ckpt | --plan)",
		Short: "Integrate the per-rank slices of a checkpoint set into one whole checkpoint",
		Long: `Integrate a checkpoint set, one .ckpt per rank (what a parallel run saves with
integrated_save=False), into one checkpoint holding every tensor whole: what
MindSpore's build_searched_strategy and merge_sliced_parameter do, without
loading the set into memory. Optimizer state (moments.X) follows X's layout.

The set is a directory holding device{i}/ckpt_{i}/ per rank (the newest
checkpoint of --prefix in each), a reshard output directory (its manifest
gives the layout), or the rank files in rank order. The layout of the
slices comes from --strategy, else from strategy.ckpt, strategy.json or a
strategy/ directory in the set directory; without one every tensor is taken
as replicated (a data-parallel set), and --bn-stats says what to do with
tensors whose copies differ.

--strategy may name a directory of per-stage strategy files (a pipeline
job's, one per stage or per rank), merged in memory as mspipe ckpt strategy
merge does. A set of K x D ranks whose strategy has K stages on D devices is
a pipeline set: each rank's file holds its stage's parameters only, and each
parameter is read from the ranks of its stage(s). Optimizer-sharded layouts
(opt_weight_shard_step/size) are read as the slices the ranks hold.

OUT is written atomically as MindSpore's save_checkpoint writes by default
(plain protobuf; --crc appends the crc_num trailer), with manifest.json
beside it (a content hash per tensor, re-checked after
writing; see mspipe ckpt verify). --plan prints what would be read and
written without writing anything.

The inputs are only read: an OUT that is, holds or lies inside one of them
(the set directory, a rank file, the strategy file, the manifest) is
refused before anything is written. An existing OUT or manifest.json is
refused unless --force; one merge at a time writes into a directory.

Exit status: 0 merged, 1 the set, its strategy or the memory cap do not fit
(the message names the file and the tensor), 2 usage error or a file that
cannot be read.`,
		Example: `  mspipe ckpt merge runs/<run-id>/stages/train -o merged/CKP-Integrated_1-2_156.ckpt
  mspipe ckpt merge rank0.ckpt rank1.ckpt rank2.ckpt rank3.ckpt --strategy strategy.ckpt -o full.ckpt
  mspipe ckpt merge runs/<run-id>/stages/train --plan --max-memory 64MiB`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt, err := f.options()
			if err != nil {
				return usageErr(err)
			}
			if out == "" && !plan {
				return usageErr(fmt.Errorf("-o OUT.ckpt: say where the merged checkpoint goes"))
			}
			set, in, err := ckptset.Load(args, f.prefix, f.strategy)
			if err != nil {
				return engineErr(err)
			}
			name := filepath.Base(out)
			if out == "" {
				// --plan alone: the name a merge would get, as ckpt/integrate names it.
				name = ckptset.FileName(f.prefix, in.Files[0])
			}
			target := reshard.Target{Ranks: 1, Files: []string{name}}
			if plan {
				p, err := reshard.Plan(cmd.Context(), set.Source, target, opt)
				if err != nil {
					return engineErr(err)
				}
				return writePlan(cmd.OutOrStdout(), f.format, in, p)
			}
			m, err := ckptset.Merge(cmd.Context(), set, in, out, force, opt)
			if err != nil {
				return engineErr(err)
			}
			return writeRunResult(cmd.OutOrStdout(), f.format, in, filepath.Dir(out), m, f.verify)
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVarP(&out, "output", "o", "", "the merged checkpoint to write (manifest.json goes beside it)")
	cmd.Flags().BoolVar(&plan, "plan", false, "dry run: print bytes to read and write, peak memory and per-tensor moves")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing OUT and manifest.json")
	return cmd
}

func newCkptReshardCmd() *cobra.Command {
	var f engineFlags
	var out, targetStrategy string
	var devices int
	var plan, force bool
	var indivisible string
	var job ckptset.Job
	var mode string
	var opStrategies []string
	cmd := &cobra.Command{
		Use:   "reshard SET_DIR | CKPT_FILE... -o OUT_DIR (--devices M [--model NAME --mode MODE --op-strategy OP=SPLITS...] | --target-strategy FILE)",
		Short: "Reshard a checkpoint set from N ranks to M ranks, straight from slices to slices",
		Long: `Reshard a checkpoint set for another number of devices or another strategy:
N per-rank slices (or one integrated checkpoint) to M per-rank slices, by
intersecting the source and target boxes of every tensor, reading only the
byte ranges needed, in bands that keep the data in memory under
--max-memory. This is what MindSpore's load_distributed_checkpoint with
predict_strategy does inside a live job, done offline.

The source is read as mspipe ckpt merge reads it (see its help). The target
is the layout of the next training when --model is given: --devices M with
its --mode, --op-strategy (npu/train's strategy, one operator per flag),
--batch-size, --parallel-optimizer (with --optimizer-weight-shard-size) and
--pipeline-stages (with --micro-size); mspipe derives where each of its
ranks holds which slice as that training does (with the parallel
optimizer, its piece of every parameter whose update is split, and of the
moments; with pipeline stages, the slices of its stage's parameters
only, the stages cut as npu/train's default cut), writes the strategy file it would
write, and the training starts from its own slices with nothing to re-cut. Else the target
is --target-strategy FILE (a MindSpore strategy file for the new cluster;
a directory of per-stage files makes a pipeline target, each parameter only
in its stage's ranks, which a merged file cannot say) or --devices M alone, which follows one rule: a tensor the source splits
is split into M equal slices along its first split dimension; replicated
tensors stay replicated; optimizer state follows its parameter. When that
dimension does not divide by M, --indivisible decides: refuse (the default;
the message lists the device counts that divide), split (uneven slices as
numpy.array_split cuts them, ranks past the rows holding empty ones; the
manifest records them, and no strategy.ckpt is written since a MindSpore
strategy file cannot describe them) or replicate (the tensor whole on every
rank, M copies). The summary prints the bytes in and out.

OUT_DIR gets device{i}/ckpt_{i}/{prefix}-{epoch}_{step}.ckpt per target rank
(the layout npu/train's init: reads), strategy.ckpt (the target layout, as
load_distributed_checkpoint expects it) and manifest.json, written last,
once every output file has been re-read and its tensors' content hashes
equal the source's. The set is built in a fresh directory beside OUT_DIR
(.{name}.tmp-{digits}) that replaces OUT_DIR only once complete, so a
failed run (a full disk, a kill) leaves what was there whole; later runs
remove such leftovers. An OUT_DIR holding anything is refused unless
--force, which replaces it whole (never merged with foreign files); a
second reshard into the same OUT_DIR at once is refused. The inputs are
only read: an OUT_DIR that is, holds or lies inside one of them is refused
before anything is written, and so is a set larger than the free space.
--devices is at most 4096.

--plan prints, without writing anything, the bytes to read and write, the
peak memory against the cap, and every tensor's moves (which source rank
sends which box to which target rank).

Exit status: 0 resharded, 1 the set, its strategy or the memory cap do not
fit (the message names the file and the tensor), 2 usage error or a file
that cannot be read.`,
		Example: `  # 8 ranks to 4, the source layout from the set's strategy.ckpt
  mspipe ckpt reshard runs/<run-id>/stages/train --devices 4 -o resharded
  # look before writing: bytes, peak memory, per-tensor moves
  mspipe ckpt reshard runs/<run-id>/stages/train --devices 4 --plan --max-memory 256MiB
  # to the layout of another strategy file, averaging BatchNorm statistics
  mspipe ckpt reshard set64/ --target-strategy strategy56.ckpt --bn-stats mean -o set56
  # an integrated checkpoint split for 2 devices
  mspipe ckpt reshard CKP-Integrated_1-4_32.ckpt --strategy train_strategy.ckpt --devices 2 -o out
  # straight to the layout the next training (4 devices) runs
  mspipe ckpt reshard CKP-2_156.ckpt --devices 4 --model resnet20 --mode semi_auto_parallel \
      --op-strategy 'end_point.matmul=[[2,1],[2,1]]' --batch-size 32 -o next`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt, err := f.options()
			if err != nil {
				return usageErr(err)
			}
			switch {
			case (devices > 0) == (targetStrategy != ""):
				return usageErr(fmt.Errorf("give the target as --devices M or --target-strategy FILE (one of them)"))
			case job.Model == "" && (mode != "" || len(opStrategies) > 0 || job.BatchPerDevice != 0 || job.FullBatch || job.ParallelOptimizer || job.PipelineStages > 1):
				return usageErr(fmt.Errorf("--mode, --op-strategy, --batch-size, --full-batch, --parallel-optimizer and --pipeline-stages describe the next training: give its --model too"))
			case job.MicroSize > 1 && job.PipelineStages < 2:
				return usageErr(fmt.Errorf("--micro-size needs --pipeline-stages (2 or more)"))
			case job.OptimizerShardSize != 0 && !job.ParallelOptimizer:
				return usageErr(fmt.Errorf("--optimizer-weight-shard-size needs --parallel-optimizer"))
			case devices < 0 || devices > reshard.MaxRanks:
				return usageErr(fmt.Errorf("--devices %d: want 1 to %d (each target rank is an output file to plan and write)", devices, reshard.MaxRanks))
			case out == "" && !plan:
				return usageErr(fmt.Errorf("-o OUT_DIR: say where the resharded set goes"))
			}
			set, in, err := ckptset.Load(args, f.prefix, f.strategy)
			if err != nil {
				return engineErr(err)
			}
			var target reshard.Target
			var layout *parallel.StrategyFile
			if job.Model != "" {
				if mode != "" {
					if job.Mode, err = parallel.ParseMode(mode); err != nil {
						return usageErr(fmt.Errorf("--mode: %w", err))
					}
				}
				if job.Strategy, err = parseOpStrategies(opStrategies); err != nil {
					return usageErr(err)
				}
				job.Devices = devices
				if target, layout, err = set.TargetFor(job); err != nil {
					return engineErr(err)
				}
			} else if targetStrategy != "" {
				if layout, err = parallel.ReadStrategies(targetStrategy); err != nil {
					return engineErr(err)
				}
				if target, err = set.Target(layout); err != nil {
					return engineErr(fmt.Errorf("%s: %w", targetStrategy, err))
				}
			} else {
				var uneven []string
				if target, uneven, err = reshard.DevicesTarget(set.Source, devices, indivisible); err != nil {
					if errors.Is(err, reshard.ErrIndivisible) {
						err = fmt.Errorf("%w (--indivisible, --devices)", err)
					}
					return engineErr(err)
				}
				layout = set.StrategyForDevices(devices)
				if len(uneven) > 0 {
					layout = nil
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %d tensors split unevenly (%s): the manifest records their slices; no strategy.ckpt is written, a MindSpore strategy file cannot describe them\n", len(uneven), strings.Join(uneven, ", "))
				}
			}
			target.Files = ckptset.TargetFiles(target.Ranks, f.prefix, in.Files[0])
			if plan {
				p, err := reshard.Plan(cmd.Context(), set.Source, target, opt)
				if err != nil {
					return engineErr(err)
				}
				return writePlan(cmd.OutOrStdout(), f.format, in, p)
			}
			m, err := ckptset.Reshard(cmd.Context(), set, in, target, layout, out, force, opt)
			if err != nil {
				return engineErr(err)
			}
			return writeRunResult(cmd.OutOrStdout(), f.format, in, out, m, f.verify)
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVarP(&out, "output", "o", "", "directory for the resharded set (new or empty)")
	cmd.Flags().BoolVar(&force, "force", false, "replace a non-empty OUT_DIR whole")
	cmd.Flags().IntVar(&devices, "devices", 0, "target device count (layout rule in the help above)")
	cmd.Flags().StringVar(&targetStrategy, "target-strategy", "", "strategy file of the target cluster, or a directory of its per-stage files (a pipeline target)")
	cmd.Flags().StringVar(&job.Model, "model", "", "the next training's model: the target is its layout on --devices")
	cmd.Flags().StringVar(&mode, "mode", "", "the next training's parallel mode (with --model; default stand_alone)")
	cmd.Flags().StringArrayVar(&opStrategies, "op-strategy", nil, "the next training's shard strategy of one operator, OP=[[splits...],...] as in npu/train's strategy (repeat per operator)")
	cmd.Flags().IntVar(&job.BatchPerDevice, "batch-size", 0, "the next training's batch size per device (with --model; default npu/train's)")
	cmd.Flags().BoolVar(&job.FullBatch, "full-batch", false, "the next training's full_batch (with --model)")
	cmd.Flags().BoolVar(&job.ParallelOptimizer, "parallel-optimizer", false, "the next training's parallel_optimizer (with --model): each rank gets its pieces of the parameters whose update is split")
	cmd.Flags().IntVar(&job.OptimizerShardSize, "optimizer-weight-shard-size", 0, "the next training's optimizer_weight_shard_size (with --parallel-optimizer; default: every rank that holds the same slice)")
	cmd.Flags().IntVar(&job.PipelineStages, "pipeline-stages", 0, "the next training's pipeline_stages (with --model): each rank gets the slices of its stage's parameters only")
	cmd.Flags().IntVar(&job.MicroSize, "micro-size", 0, "the next training's micro_size (with --pipeline-stages): the strategy is checked on one micro-batch")
	cmd.Flags().StringVar(&indivisible, "indivisible", reshard.IndivisibleRefuse, "with --devices, a split dimension that does not divide by M: refuse, split (uneven slices) or replicate (whole on every rank)")
	cmd.Flags().BoolVar(&plan, "plan", false, "dry run: print bytes to read and write, peak memory and per-tensor moves")
	return cmd
}

func newCkptVerifyCmd() *cobra.Command {
	var f engineFlags
	cmd := &cobra.Command{
		Use:   "verify DIR",
		Short: "Check a merge or reshard output against its manifest",
		Long: `Re-read a set written by mspipe ckpt merge or reshard (or the ckpt/integrate
and ckpt/reshard stages) and check it against its manifest.json: no
checkpoint or strategy file the manifest does not list (a stale one beside
a rank's file is what a loader would pick), the strategy file's size and
SHA-256, every file's size and CRC-32 (and crc_num trailer, when the set
has them), every rank's tensors and the shapes of their
slices, identical copies wherever ranks share a slice, and the SHA-256 of
every whole tensor reassembled from the slices, which equals the source's.

Exit status: 0 verified, 1 a difference (the message names the file and the
tensor), 2 usage error or a missing manifest.`,
		Example: `  mspipe ckpt verify resharded/
  mspipe ckpt verify runs/<run-id>/stages/reshard/checkpoints --max-memory 64MiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt, err := f.options()
			if err != nil {
				return usageErr(err)
			}
			m, err := reshard.Verify(cmd.Context(), args[0], opt)
			if err != nil {
				return engineErr(err)
			}
			if f.format == "json" {
				return writeJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: verified %d files, %d tensors (%s of tensor data) against %s\n",
				args[0], len(m.Files), len(m.Tensors), bytesize.Format(tensorBytes(m)), reshard.ManifestName)
			return nil
		},
	}
	f.add(cmd, false)
	return cmd
}

func tensorBytes(m *reshard.Manifest) int64 {
	var n int64
	for _, t := range m.Tensors {
		n += t.Bytes
	}
	return n
}

func sourceLine(in ckptset.Input) string {
	from := fmt.Sprintf("%d rank files", len(in.Files))
	if in.Root != "" {
		from = fmt.Sprintf("%s (%d ranks)", in.Root, len(in.Files))
	}
	switch {
	case in.Manifest:
		return from + ", layout from its " + reshard.ManifestName
	case in.Strategy != "":
		return from + ", layout from " + in.Strategy
	}
	return from + ", no strategy file: every tensor replicated"
}

func writeRunResult(w io.Writer, format string, in ckptset.Input, out string, m *reshard.Manifest, verify string) error {
	if format == "json" {
		return writeJSON(w, m)
	}
	fmt.Fprintf(w, "source: %s\n", sourceLine(in))
	for _, f := range m.Files {
		fmt.Fprintf(w, "rank %d: %s (%d bytes, crc32 %s)\n", f.Rank, filepath.Join(out, filepath.FromSlash(f.Path)), f.Bytes, f.CRC32)
	}
	proof := "files re-read and checked against the CRC-32 of what was written; content hashes from the source's bytes"
	if verify == reshard.VerifyOutputSHA256 {
		proof = "every tensor re-read from the written files and its content hash checked against the source's"
	}
	fmt.Fprintf(w, "%d tensors (%s): %s; manifest: %s\n",
		len(m.Tensors), bytesize.Format(tensorBytes(m)), proof, filepath.Join(out, reshard.ManifestName))
	if s := m.Stats; s != nil {
		fmt.Fprintf(w, "in %s (%d source files), out %s (%d files); read %s of tensor data, peak memory %s\n",
			bytesize.Format(s.SourceBytes), len(in.Files), bytesize.Format(s.WriteBytes), len(m.Files), bytesize.Format(s.ReadBytes), bytesize.Format(s.PeakMemory))
	}
	return nil
}

func writePlan(w io.Writer, format string, in ckptset.Input, p *reshard.PlanResult) error {
	if format == "json" {
		return writeJSON(w, p)
	}
	fmt.Fprintf(w, "plan: %d ranks -> %d ranks\nsource: %s\n", p.SourceRanks, p.TargetRanks, sourceLine(in))
	fmt.Fprintf(w, "in %d bytes (%s), out %d bytes (%s); read %d bytes (%s), peak memory %d bytes (%s) of the %s cap\n",
		p.SourceBytes, bytesize.Format(p.SourceBytes), p.WriteBytes, bytesize.Format(p.WriteBytes),
		p.ReadBytes, bytesize.Format(p.ReadBytes),
		p.PeakMemory, bytesize.Format(p.PeakMemory), bytesize.Format(p.MaxMemory))
	for r, f := range p.Files {
		fmt.Fprintf(w, "rank %d: %s (%d bytes)\n", r, f, p.FileBytes[r])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tDTYPE\tSHAPE\tBYTES\tRULE\tBANDS\tREAD\tWRITE\tMOVES")
	for _, t := range p.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", termText(t.Name), t.DType, pyShape(toInt64s(t.Shape)), t.Bytes, t.Rule, t.Bands, t.ReadBytes, t.WriteBytes, moves(t.Moves))
	}
	return tw.Flush()
}

// moves prints a tensor's moves as "0->0 [0:2], 1->0 [2:4]": source rank,
// target rank and the rows of dimension 0 (the whole box when it has
// more split dimensions).
func moves(ms []reshard.Move) string {
	if len(ms) == 0 {
		return "-"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%d->%d %s", m.From, m.To, boxString(m.Box))
	}
	return strings.Join(parts, ", ")
}

// boxString prints a box as numpy slices: [0:2, 0:8]; [] for a scalar.
func boxString(b parallel.Box) string {
	parts := make([]string, len(b.Shape))
	for k := range b.Shape {
		parts[k] = fmt.Sprintf("%d:%d", b.Offset[k], b.Offset[k]+b.Shape[k])
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// parseOpStrategies reads --op-strategy values, OP=[[a,b],[c,d]] each.
func parseOpStrategies(values []string) (parallel.Strategy, error) {
	if len(values) == 0 {
		return nil, nil
	}
	s := parallel.Strategy{}
	for _, v := range values {
		op, splits, ok := strings.Cut(v, "=")
		if !ok || op == "" {
			return nil, fmt.Errorf("--op-strategy %q: want OP=[[splits...],...], e.g. end_point.matmul=[[2,1],[2,1]]", v)
		}
		var parsed [][]int
		if err := json.Unmarshal([]byte(splits), &parsed); err != nil {
			return nil, fmt.Errorf("--op-strategy %q: %s is not a list of lists of split counts: %v", v, splits, err)
		}
		if _, dup := s[op]; dup {
			return nil, fmt.Errorf("--op-strategy: operator %s given twice", op)
		}
		s[op] = parsed
	}
	return s, nil
}
