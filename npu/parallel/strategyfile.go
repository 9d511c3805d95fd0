package parallel

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
)

// StrategyFile is a parallel strategy file: the shard strategy of every
// operator and the layout of every parameter, as MindSpore's
// strategy_ckpt_save_file holds them.
//
// With pipeline parallelism MindSpore writes one file per stage (each rank
// writes its stage's): CurrentStage is that stage, every operator carries
// it, and the layouts are those of the stage's parameters only, on the
// stage's devices. A merged file (MergeStrategies, MindSpore's
// merge_pipeline_strategys) holds every stage's operators, each with its
// own stage (OperatorStages), and every stage's layouts.
type StrategyFile struct {
	CurrentStage int                     // current_stage: the pipeline stage that wrote the file
	Operators    map[string][][]int      // parallel_strategy_item: operator name -> strategy (one list per input)
	Layouts      map[string]TensorLayout // parallel_layout_item: parameter name -> layout
	// OperatorStages is the stage (ParallelStrategys.stage) of the
	// operators whose stage is not CurrentStage; nil or absent entries
	// mean CurrentStage, as in every file a single stage writes.
	OperatorStages map[string]int
	// ParamStages, set by MergeStrategies only, lists the stages whose
	// files held each parameter's layout (two for a parameter stages
	// share). The file formats have no place for it: a merged file read
	// back has none, and a parameter's stage is then found from which
	// ranks' checkpoints hold it, as MindSpore finds it.
	ParamStages map[string][]int
}

// OperatorStage returns the pipeline stage of operator op.
func (f *StrategyFile) OperatorStage(op string) int {
	if s, ok := f.OperatorStages[op]; ok {
		return s
	}
	return f.CurrentStage
}

// Stages returns the pipeline stages the file describes, ascending: its
// current stage, its operators' and its parameters'.
func (f *StrategyFile) Stages() []int {
	set := map[int]bool{f.CurrentStage: true}
	for op := range f.Operators {
		set[f.OperatorStage(op)] = true
	}
	for _, stages := range f.ParamStages {
		for _, s := range stages {
			set[s] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// StrategyFormat is the encoding of a strategy file on disk.
type StrategyFormat int

const (
	// FormatProto is MindSpore's protobuf ParallelStrategyMap (the form
	// MindSpore writes for a strategy_ckpt_save_file named *.ckpt).
	FormatProto StrategyFormat = iota
	// FormatJSON is MindSpore's JSON form (a strategy_ckpt_save_file named
	// *.json):
	//
	//	{"current_stage": 0,
	//	 "parallel_strategy_item": {"fc.matmul": {"stage": 0, "parallel_strategy": [[1, 1], [1, 2]]}},
	//	 "parallel_layout_item": {"fc.weight": {"dev_matrix": [2, 1, 2], "tensor_map": [-1, 0],
	//	   "tensor_shape": [10, 8], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}
	//
	// A layout split unevenly has "param_split_shape" and "indices_offset"
	// too. tensor_shape is left out when the layout's Shape is unknown.
	FormatJSON
)

// String returns the format's name.
func (f StrategyFormat) String() string {
	switch f {
	case FormatProto:
		return "protobuf"
	case FormatJSON:
		return "json"
	}
	return fmt.Sprintf("StrategyFormat(%d)", int(f))
}

// MaxStrategyFileBytes bounds the size of a strategy file mspipe reads,
// far above what a model with hundreds of thousands of parameters needs.
const MaxStrategyFileBytes = 256 << 20

// maxLayoutDims bounds the length of a device matrix, tensor map, shape or
// strategy list, far above MindSpore's 8 tensor dimensions.
const maxLayoutDims = 64

// maxDimSize bounds a tensor dimension, a split size and an offset: no
// real parameter comes near it, it fits an int everywhere, and sums of a
// few million such numbers cannot overflow an int64.
const maxDimSize = math.MaxInt32

// ReadStrategyFile reads the strategy file at path, protobuf or JSON
// (detected by content: the JSON form starts with '{', which no protobuf
// ParallelStrategyMap can), and validates it. Errors name the file and the
// operator or parameter at fault.
func ReadStrategyFile(path string) (*StrategyFile, error) {
	data, err := userfile.ReadFile(context.Background(), path, MaxStrategyFileBytes)
	if err != nil {
		return nil, fmt.Errorf("read strategy file %s: %w", path, err)
	}
	return DecodeStrategyFile(path, data)
}

// DecodeStrategyFile decodes and validates the content of a strategy file;
// name is used in errors. An error found while reading the JSON form names
// the place as name:line:col.
func DecodeStrategyFile(name string, data []byte) (*StrategyFile, error) {
	var (
		f   *StrategyFile
		err error
	)
	if IsJSONStrategy(data) {
		if f, err = decodeStrategyJSON(data); err != nil {
			if pos := jsonPosition(data, err); pos != "" {
				name += ":" + pos
			}
		}
	} else {
		f, err = decodeStrategyProto(data)
	}
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("strategy file %s: %w", name, err)
	}
	return f, nil
}

// IsJSONStrategy reports whether data is in the JSON form: its first
// non-space byte is '{'. In protobuf that byte would start field 15 as a
// group, which ParallelStrategyMap does not have.
func IsJSONStrategy(data []byte) bool {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// WriteStrategyFile validates f and writes it to path atomically in the
// given format. Operators and layouts are written in name order, so equal
// files give equal bytes.
func WriteStrategyFile(path string, f *StrategyFile, format StrategyFormat) error {
	data, err := EncodeStrategyFile(f, format)
	if err != nil {
		return fmt.Errorf("write strategy file %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write strategy file: %w", err)
	}
	return nil
}

// EncodeStrategyFile validates f and returns its bytes in the given format.
func EncodeStrategyFile(f *StrategyFile, format StrategyFormat) ([]byte, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: no strategy file", ErrStrategyFile)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	switch format {
	case FormatProto:
		return encodeStrategyProto(f)
	case FormatJSON:
		return encodeStrategyJSON(f), nil
	}
	return nil, fmt.Errorf("%w: unknown format %v", ErrStrategyFile, format)
}

// Devices returns the device count the file's layouts share (that of the
// stage that wrote it), or 0 when the file has no layouts.
func (f *StrategyFile) Devices() int {
	for _, name := range slices.Sorted(maps.Keys(f.Layouts)) {
		return f.Layouts[name].Devices()
	}
	return 0
}

// Validate checks the stage, every operator strategy and every layout, and
// that all layouts have the same device count (a strategy file describes
// the devices of one stage). Errors name the operator or parameter; the
// first problem in name order is returned.
func (f *StrategyFile) Validate() error {
	if err := checkStage("current_stage", f.CurrentStage); err != nil {
		return err
	}
	for _, op := range slices.Sorted(maps.Keys(f.OperatorStages)) {
		if _, ok := f.Operators[op]; !ok {
			return fmt.Errorf("%w: a stage for operator %s, which has no strategy", ErrStrategyFile, op)
		}
		if err := checkStage("operator "+op+" stage", f.OperatorStages[op]); err != nil {
			return err
		}
	}
	devices, first := 0, ""
	for _, name := range slices.Sorted(maps.Keys(f.Layouts)) {
		if name == "" {
			return fmt.Errorf("%w: a layout without a parameter name", ErrStrategyFile)
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("%w: parameter name %q is not UTF-8 text", ErrStrategyFile, name)
		}
		l := f.Layouts[name]
		if err := l.Validate(); err != nil {
			return fmt.Errorf("parameter %s: %w", name, err)
		}
		if devices == 0 {
			devices, first = l.Devices(), name
		} else if n := l.Devices(); n != devices {
			return fmt.Errorf("%w: parameter %s: device matrix %v has %d devices, parameter %s's has %d; all layouts of one file share the stage's devices",
				ErrLayout, name, l.DeviceMatrix, n, first, devices)
		}
	}
	for _, op := range slices.Sorted(maps.Keys(f.Operators)) {
		if err := validateOperator(op, f.Operators[op], devices); err != nil {
			return err
		}
	}
	return nil
}

// maxStage bounds a pipeline stage: MindSpore's field is a uint32, and no
// job has more stages than devices.
const maxStage = maxDevices

func checkStage(what string, stage int) error {
	if stage < 0 || stage > maxStage {
		return fmt.Errorf("%w: %s %d is outside 0 to %d", ErrStrategyFile, what, stage, maxStage)
	}
	return nil
}

// validateOperator checks one operator's strategy: at most maxLayoutDims
// inputs and dimensions, every dimension split at least once, and, when the
// file's device count is known, a number of slices that divides it.
func validateOperator(op string, strategy [][]int, devices int) error {
	if op == "" {
		return fmt.Errorf("%w: an operator without a name", ErrStrategy)
	}
	if !utf8.ValidString(op) {
		return fmt.Errorf("%w: operator name %q is not UTF-8 text", ErrStrategyFile, op)
	}
	if len(strategy) > maxLayoutDims {
		return fmt.Errorf("%w: operator %s has %d inputs, more than %d", ErrStrategy, op, len(strategy), maxLayoutDims)
	}
	for i, shard := range strategy {
		if len(shard) > maxLayoutDims {
			return fmt.Errorf("%w: operator %s input %d has %d dimensions, more than %d", ErrStrategy, op, i, len(shard), maxLayoutDims)
		}
		used, err := shardProduct(shard)
		if err == nil && devices > 0 && devices%used != 0 {
			err = fmt.Errorf("%w: %v uses %d devices, which does not divide the stage's %d", ErrStrategy, shard, used, devices)
		}
		if err != nil {
			return fmt.Errorf("operator %s input %d: %w", op, i, err)
		}
	}
	return nil
}

// setOperatorStages keeps, of the stages read for each operator, those
// that differ from the file's current stage, so that a file one stage
// wrote reads with no OperatorStages at all.
func (f *StrategyFile) setOperatorStages(stages map[string]int) {
	for op, s := range stages {
		if s == f.CurrentStage {
			continue
		}
		if f.OperatorStages == nil {
			f.OperatorStages = map[string]int{}
		}
		f.OperatorStages[op] = s
	}
}
