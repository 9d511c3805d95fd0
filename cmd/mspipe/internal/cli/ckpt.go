package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/spf13/cobra"
)

func newCkptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ckpt",
		Short: "Work with MindSpore checkpoint (.ckpt) files and per-rank checkpoint sets",
	}
	cmd.AddCommand(newCkptInspectCmd(), newCkptMergeCmd(), newCkptReshardCmd(), newCkptVerifyCmd(), newCkptConvertCmd(), newCkptStrategyCmd())
	return cmd
}

func newCkptInspectCmd() *cobra.Command {
	var format, strategy, prefix string
	cmd := &cobra.Command{
		Use:   "inspect FILE | SET_DIR | RANK_FILE...",
		Short: "List the tensors of a checkpoint or of a per-rank checkpoint set",
		Long: `List the tensors of a MindSpore checkpoint in file order: name, dtype, shape,
data bytes, the start of the SHA-256 content hash (equal hashes mean equal
dtype, shape and values), and min/max/mean of float tensors (NaN if any
element is NaN, as numpy reports it). Tensors MindSpore split into several
protobuf values are shown merged; a crc_num trailer is verified. A file
ending in .safetensors is read as safetensors.

Given a directory holding device{i}/ckpt_{i}/ per rank (what npu/train
writes; the newest checkpoint of --prefix in each is used), or several
files (rank 0 first), it shows the set: every rank's file, then one row per
tensor with the shape each rank holds, the bytes of all ranks together, and
how the tensor is spread: "replicated" (every rank holds the same values),
"per-rank values" (same shape, different values: BatchNorm statistics of a
data-parallel run), or "sliced". With --strategy FILE (a MindSpore strategy
file, protobuf or JSON) the layout column shows each tensor's device matrix
and tensor map from it, and the whole shape they imply.

Exit status: 0 a valid checkpoint, 1 a damaged or invalid checkpoint (the
message names the file, the tensor and the byte offset), 2 usage error or a
file that cannot be read.`,
		Example: `  mspipe ckpt inspect ckpt_0/CKP-2_156.ckpt
  mspipe ckpt inspect CKP-Integrated_1-4_32.ckpt --format json
  mspipe ckpt inspect runs/<run-id>/stages/train               # every rank's newest checkpoint
  mspipe ckpt inspect runs/<run-id>/stages/train --strategy strategy.ckpt
  mspipe ckpt inspect rank0.ckpt rank1.ckpt rank2.ckpt rank3.ckpt`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usageErr(fmt.Errorf("--format: unknown format %q (text or json)", format))
			}
			if isSetArgs(args, strategy) {
				return inspectSet(cmd, args, prefix, strategy, format)
			}
			file, err := readCheckpointFile(args[0])
			if err != nil {
				return checkpointErr(err)
			}
			report := inspectReport(args[0], file)
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), report)
			}
			return writeInspectText(cmd.OutOrStdout(), report)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	cmd.Flags().StringVar(&strategy, "strategy", "", "strategy file giving the layout of the set's tensors, or a directory of per-stage strategy files (merged)")
	cmd.Flags().StringVar(&prefix, "prefix", ckpt.DefaultPrefix, "checkpoint file prefix in a set directory")
	return cmd
}

// checkpointErr gives a damaged checkpoint exit status 1 and an unreadable
// one exit status 2.
func checkpointErr(err error) error {
	var bad *ckpt.Error
	if errors.As(err, &bad) {
		return &exitError{Code: ExitFailed, Err: err}
	}
	return usageErr(err)
}

// readCheckpointFile reads a .ckpt, or a .safetensors file by its name.
func readCheckpointFile(path string) (*ckpt.File, error) {
	if isSafetensors(path) {
		st, err := ckpt.ReadSafetensors(path)
		if err != nil {
			return nil, err
		}
		return &ckpt.File{Tensors: st.Tensors, Values: len(st.Tensors)}, nil
	}
	return ckpt.ReadFile(path)
}

func isSafetensors(path string) bool {
	return strings.HasSuffix(strings.ToLower(path), ckpt.SafetensorsExt)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type ckptReport struct {
	File    string       `json:"file"`
	Values  int          `json:"values"` // protobuf Value entries, counting slices
	Bytes   int64        `json:"bytes"`  // tensor data bytes
	CRC     bool         `json:"crc32"`  // a crc_num trailer was present and matched
	Tensors []tensorInfo `json:"tensors"`
}

type tensorInfo struct {
	Name   string       `json:"name"`
	DType  string       `json:"dtype"`
	Shape  []int64      `json:"shape"`
	Bytes  int          `json:"bytes"`
	SHA256 string       `json:"sha256"`
	Stats  *tensorStats `json:"stats"` // null for non-float or empty tensors
}

type tensorStats struct {
	Min  statFloat `json:"min"`
	Max  statFloat `json:"max"`
	Mean statFloat `json:"mean"`
}

// statFloat prints as the shortest decimal that reads back as the tensor's
// own precision; JSON gets NaN and ±Inf as strings since it has no numbers
// for them.
type statFloat struct {
	v    float64
	bits int // 32 or 64
}

func (f statFloat) String() string { return strconv.FormatFloat(f.v, 'g', -1, f.bits) }

func (f statFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
		return json.Marshal(f.String())
	}
	return []byte(f.String()), nil
}

func inspectReport(path string, file *ckpt.File) ckptReport {
	r := ckptReport{File: path, Values: file.Values, CRC: file.CRC, Tensors: make([]tensorInfo, 0, len(file.Tensors))}
	for _, t := range file.Tensors {
		r.Bytes += int64(len(t.Data))
		r.Tensors = append(r.Tensors, tensorInfo{
			Name:   t.Name,
			DType:  t.DType,
			Shape:  append([]int64{}, t.Dims...),
			Bytes:  len(t.Data),
			SHA256: t.Hash(),
			Stats:  floatStats(t),
		})
	}
	return r
}

// floatStats returns min, max and mean of a non-empty float tensor; any NaN
// makes all three NaN, as numpy's min/max/mean do.
func floatStats(t ckpt.Tensor) *tensorStats {
	if !ckpt.IsFloat(t.DType) {
		return nil
	}
	vals, err := t.Float64s()
	if err != nil || len(vals) == 0 {
		return nil
	}
	// math.Min and math.Max return NaN once either argument is NaN.
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, v := range vals {
		lo, hi, sum = math.Min(lo, v), math.Max(hi, v), sum+v
	}
	mean := sum / float64(len(vals))
	return &tensorStats{Min: statOf(lo, t.DType), Max: statOf(hi, t.DType), Mean: statOf(mean, t.DType)}
}

func statOf(v float64, dtype string) statFloat {
	if dtype == ckpt.DTypeFloat64 {
		return statFloat{v: v, bits: 64}
	}
	return statFloat{v: float64(float32(v)), bits: 32}
}

// termText is s as the terminal should get it: unchanged when every rune
// is printable, else Go-quoted, so a tensor name holding escape sequences
// or tabs shows as text ("\x1b[2J") instead of acting on the terminal or
// the table's columns.
func termText(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}

// pyShape formats dims as Python prints a shape: (2, 3), (4,), ().
func pyShape(dims []int64) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	if len(dims) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func writeInspectText(w io.Writer, r ckptReport) error {
	crc := "none"
	if r.CRC {
		crc = "verified"
	}
	fmt.Fprintf(w, "file: %s\ntensors: %d, values: %d, data bytes: %d, crc32: %s\n\n", r.File, len(r.Tensors), r.Values, r.Bytes, crc)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tSHAPE\tBYTES\tSHA256\tMIN\tMAX\tMEAN")
	for _, t := range r.Tensors {
		lo, hi, mean := "-", "-", "-"
		if t.Stats != nil {
			lo, hi, mean = t.Stats.Min.String(), t.Stats.Max.String(), t.Stats.Mean.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", termText(t.Name), t.DType, pyShape(t.Shape), t.Bytes, t.SHA256[:12], lo, hi, mean)
	}
	return tw.Flush()
}
