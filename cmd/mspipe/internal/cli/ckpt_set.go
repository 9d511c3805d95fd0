package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/spf13/cobra"
)

// isSetArgs tells a set (a directory, several files, or a strategy to lay
// over them) from one checkpoint file.
func isSetArgs(args []string, strategy string) bool {
	if len(args) > 1 || strategy != "" {
		return true
	}
	// A path that cannot be stat'ed is left to the file reader, which says
	// why in the words of every other checkpoint read.
	st, err := os.Stat(args[0])
	return err == nil && st.IsDir()
}

type setReport struct {
	Set      string          `json:"set,omitempty"`      // the directory, when one was given
	Strategy string          `json:"strategy,omitempty"` // the strategy file laid over the set
	Ranks    []setRank       `json:"ranks"`
	Bytes    int64           `json:"bytes"` // tensor data bytes of all ranks
	Tensors  []setTensorInfo `json:"tensors"`
}

type setRank struct {
	Rank    int    `json:"rank"`
	File    string `json:"file"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
	CRC     bool   `json:"crc32"`
}

type setTensorInfo struct {
	Name   string      `json:"name"`
	DType  string      `json:"dtype"`
	Shapes [][]int64   `json:"shapes"` // per rank; null where a rank lacks the tensor
	Bytes  int64       `json:"bytes"`  // all ranks together
	Spread string      `json:"spread"` // replicated, per-rank values, sliced, or partial
	Layout *layoutInfo `json:"layout,omitempty"`
	// hashes per rank, to tell replicated from per-rank values
	hashes []string
}

// layoutInfo is a tensor's layout from a strategy file.
type layoutInfo struct {
	DeviceMatrix    []int   `json:"dev_matrix"`
	TensorMap       []int   `json:"tensor_map"`
	ParamSplitShape []int   `json:"param_split_shape,omitempty"`
	Shape           []int64 `json:"shape,omitempty"` // the whole tensor the layout and the slices imply
	Err             string  `json:"error,omitempty"` // why the slices do not fit the layout
}

// inspectSet reads the set's files one at a time (only one rank's data is
// in memory at once) and reports every tensor across the ranks.
func inspectSet(cmd *cobra.Command, args []string, prefix, strategy, format string) error {
	root, files, err := ckptset.Files(args, prefix)
	if err != nil {
		return usageErr(err)
	}
	var layouts *strategyLayouts
	if strategy != "" {
		layouts = new(strategyLayouts)
		if *layouts, err = readLayouts(strategy); err != nil {
			return checkpointErr(err)
		}
	}
	r := setReport{Set: root, Strategy: strategy}
	byName := map[string]int{}
	for rank, path := range files {
		f, err := readCheckpointFile(path)
		if err != nil {
			return checkpointErr(fmt.Errorf("rank %d: %w", rank, err))
		}
		sr := setRank{Rank: rank, File: path, Tensors: len(f.Tensors), CRC: f.CRC}
		for _, t := range f.Tensors {
			i, ok := byName[t.Name]
			if !ok {
				i = len(r.Tensors)
				byName[t.Name] = i
				r.Tensors = append(r.Tensors, setTensorInfo{Name: t.Name, DType: t.DType, Shapes: make([][]int64, len(files)), hashes: make([]string, len(files))})
			}
			ti := &r.Tensors[i]
			if ti.DType != t.DType {
				return &exitError{Code: ExitFailed, Err: fmt.Errorf("%s: tensor %q is %s, rank 0 has it as %s", path, t.Name, t.DType, ti.DType)}
			}
			ti.Shapes[rank] = append([]int64{}, t.Dims...)
			ti.hashes[rank] = t.Hash()
			ti.Bytes += int64(len(t.Data))
			sr.Bytes += int64(len(t.Data))
		}
		r.Ranks = append(r.Ranks, sr)
		r.Bytes += sr.Bytes
	}
	for i := range r.Tensors {
		t := &r.Tensors[i]
		t.Spread = spread(t.Shapes, t.hashes)
		if layouts != nil {
			t.Layout = layouts.layout(t.Name, t.Shapes)
		}
	}
	if format == "json" {
		return writeJSON(cmd.OutOrStdout(), r)
	}
	return writeSetText(cmd.OutOrStdout(), r)
}

// spread says how a tensor is spread over the ranks.
func spread(shapes [][]int64, hashes []string) string {
	for _, s := range shapes {
		if s == nil {
			return "partial"
		}
	}
	if len(slices.Compact(slices.Clone(hashes))) == 1 {
		return "replicated"
	}
	for _, s := range shapes[1:] {
		if !slices.Equal(s, shapes[0]) {
			return "sliced"
		}
	}
	// Equal shapes, different values: per-rank statistics, or an even
	// split; only a strategy file can tell which.
	return "per-rank values"
}

func writeSetText(w io.Writer, r setReport) error {
	if r.Set != "" {
		fmt.Fprintf(w, "set: %s\n", r.Set)
	}
	fmt.Fprintf(w, "ranks: %d, tensors: %d, data bytes: %d\n", len(r.Ranks), len(r.Tensors), r.Bytes)
	for _, rk := range r.Ranks {
		crc := "none"
		if rk.CRC {
			crc = "verified"
		}
		fmt.Fprintf(w, "rank %d: %s (%d tensors, %d bytes, crc32: %s)\n", rk.Rank, rk.File, rk.Tensors, rk.Bytes, crc)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	withLayout := r.Strategy != ""
	if withLayout {
		fmt.Fprintln(tw, "NAME\tDTYPE\tRANK SHAPES\tBYTES\tSPREAD\tSHAPE\tLAYOUT")
	} else {
		fmt.Fprintln(tw, "NAME\tDTYPE\tRANK SHAPES\tBYTES\tSPREAD")
	}
	for _, t := range r.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s", termText(t.Name), t.DType, rankShapes(t.Shapes), t.Bytes, t.Spread)
		if withLayout {
			whole, layout := "-", "none (replicated)"
			if t.Shapes[0] != nil {
				whole = pyShape(t.Shapes[0])
			}
			if l := t.Layout; l != nil {
				whole = "-"
				layout = fmt.Sprintf("dev_matrix %v tensor_map %v", l.DeviceMatrix, l.TensorMap)
				if len(l.ParamSplitShape) > 0 {
					layout += fmt.Sprintf(" split %v", l.ParamSplitShape)
				}
				if l.Shape != nil {
					whole = pyShape(l.Shape)
				}
				if l.Err != "" {
					layout += " (" + l.Err + ")"
				}
			}
			fmt.Fprintf(tw, "\t%s\t%s", whole, layout)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// rankShapes prints the shapes of the ranks in order, runs of equal shapes
// folded: "(2, 8) x4", "(3, 8) x2 (2, 8) x1", "- x1" for a missing one.
func rankShapes(shapes [][]int64) string {
	var parts []string
	for i := 0; i < len(shapes); {
		j := i + 1
		for j < len(shapes) && (shapes[j] == nil) == (shapes[i] == nil) && slices.Equal(shapes[j], shapes[i]) {
			j++
		}
		s := "-"
		if shapes[i] != nil {
			s = pyShape(shapes[i])
		}
		parts = append(parts, fmt.Sprintf("%s x%d", s, j-i))
		i = j
	}
	return strings.Join(parts, " ")
}
