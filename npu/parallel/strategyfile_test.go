package parallel

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleStrategyFile has one layout of each kind: even with a repeat axis,
// uneven (manual split), optimizer-sharded, and a scalar.
func sampleStrategyFile() *StrategyFile {
	return &StrategyFile{
		CurrentStage: 0,
		Operators: map[string][][]int{
			"Default/network-SemiAutoParallelNet/MatMul-op0": {{1, 1}, {1, 2}},
			"Default/network-SemiAutoParallelNet/Gather-op1": {{4, 1}, {1, 1}},
		},
		Layouts: map[string]TensorLayout{
			"weight":          {DeviceMatrix: []int{4, 1, 1, 2}, TensorMap: []int{1, 0}, Shape: []int{512, 128}},
			"embedding_table": {DeviceMatrix: []int{2, 4}, TensorMap: []int{0, -1}, ParamSplitShape: []int{3, 5, 2, 6}, IndicesOffset: []int{0, 3, 8, 10}, Shape: []int{16, 4}},
			"fc.bias":         {DeviceMatrix: []int{4, 2}, TensorMap: []int{0}, OptWeightShardStep: 2, OptWeightShardSize: 2, Shape: []int{8}},
			"learning_rate":   {DeviceMatrix: []int{8}, Shape: []int{}},
		},
	}
}

// withoutShapes is f as the protobuf form keeps it: no tensor shapes.
func withoutShapes(f *StrategyFile) *StrategyFile {
	out := &StrategyFile{CurrentStage: f.CurrentStage, Operators: f.Operators, OperatorStages: f.OperatorStages, Layouts: map[string]TensorLayout{}}
	for name, l := range f.Layouts {
		l.Shape = nil
		out.Layouts[name] = l
	}
	return out
}

func TestStrategyFileRoundTrip(t *testing.T) {
	f := sampleStrategyFile()
	for _, tc := range []struct {
		format StrategyFormat
		want   *StrategyFile
	}{
		{FormatProto, withoutShapes(f)},
		{FormatJSON, f},
	} {
		t.Run(tc.format.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "strategy.ckpt")
			if err := WriteStrategyFile(path, f, tc.format); err != nil {
				t.Fatal(err)
			}
			got, err := ReadStrategyFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("read back\n%+v\nwant\n%+v", got, tc.want)
			}
			// Equal files give equal bytes (name order, not map order).
			first, _ := os.ReadFile(path)
			again, err := EncodeStrategyFile(got, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if tc.format == FormatJSON && !bytes.Equal(first, again) {
				t.Fatalf("re-encoding changed the bytes:\n%s\n%s", first, again)
			}
			if tc.format == FormatProto {
				shapeless, _ := EncodeStrategyFile(withoutShapes(f), FormatProto)
				if !bytes.Equal(first, again) || !bytes.Equal(first, shapeless) {
					t.Fatal("protobuf encoding is not deterministic or depends on shapes it does not hold")
				}
			}
		})
	}
}

func TestStrategyJSONIsMindSporeShaped(t *testing.T) {
	f := &StrategyFile{
		CurrentStage: 1,
		Operators:    map[string][][]int{"MatMul-op0": {{1, 1}, {1, 2}}},
		Layouts: map[string]TensorLayout{
			"emb": {DeviceMatrix: []int{2}, TensorMap: []int{0, -1}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 3}, Shape: []int{8, 4}},
			"w":   {DeviceMatrix: []int{2}, TensorMap: []int{-1, 0}},
		},
	}
	data, err := EncodeStrategyFile(f, FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "current_stage": 1,
  "parallel_strategy_item": {
    "MatMul-op0": {"stage":1,"parallel_strategy":[[1,1],[1,2]]}
  },
  "parallel_layout_item": {
    "emb": {"dev_matrix":[2],"tensor_map":[0,-1],"tensor_shape":[8,4],"field":0,"opt_weight_shard_step":0,"opt_weight_shard_size":0,"param_split_shape":[3,5],"indices_offset":[0,3]},
    "w": {"dev_matrix":[2],"tensor_map":[-1,0],"field":0,"opt_weight_shard_step":0,"opt_weight_shard_size":0}
  }
}
`
	if string(data) != want {
		t.Fatalf("JSON form\n%s\nwant\n%s", data, want)
	}
}

// mindSporeBytes is a strategy file written byte by byte the way
// MindSpore's StrategyCheckpointInfo::to_protobuf lays it out: fields in
// number order, repeated scalars unpacked, one dev_matrix and tensor_map,
// an empty param_split_shape and indices_offset for an even layout, and a
// negative tensor map entry as a ten-byte varint.
var mindSporeBytes = []byte{
	0x08, 0x00, // current_stage: 0
	0x12, 0x1c, // parallel_strategy_item, 28 bytes
	0x0a, 0x0a, 'M', 'a', 't', 'M', 'u', 'l', '-', 'o', 'p', '0', // node_name
	0x12, 0x0e, // parallel_strategys, 14 bytes
	0x08, 0x00, // stage: 0
	0x12, 0x04, 0x08, 0x01, 0x08, 0x01, // parallel_strategy {dim: 1 dim: 1}
	0x12, 0x04, 0x08, 0x01, 0x08, 0x02, // parallel_strategy {dim: 1 dim: 2}
	0x1a, 0x30, // parallel_layout_item, 48 bytes
	0x0a, 0x09, 'f', 'c', '.', 'w', 'e', 'i', 'g', 'h', 't', // param_name
	0x12, 0x23, // parallel_layouts, 35 bytes
	0x0a, 0x08, 0x08, 0x04, 0x08, 0x01, 0x08, 0x01, 0x08, 0x02, // dev_matrix {4 1 1 2}
	0x12, 0x0d, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x08, 0x00, // tensor_map {-1 0}
	0x1a, 0x00, // param_split_shape {}
	0x22, 0x00, // indices_offset {}
	0x28, 0x00, // field: 0
	0x30, 0x00, // opt_weight_shard_step: 0
	0x38, 0x00, // opt_weight_shard_size: 0
}

// oldMindSporeLayout is a layout item from a MindSpore release before the
// parallel optimizer: no opt_weight_shard fields. It splits a table of 8
// rows unevenly in two, each slice on 4 of the 8 devices.
var oldMindSporeLayout = []byte{
	0x1a, 0x30, // parallel_layout_item, 48 bytes
	0x0a, 0x09, 'e', 'm', 'b', 'e', 'd', 'd', 'i', 'n', 'g', // param_name
	0x12, 0x23, // parallel_layouts, 35 bytes
	0x0a, 0x04, 0x08, 0x04, 0x08, 0x02, // dev_matrix {4 2}
	0x12, 0x0d, 0x08, 0x00, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // tensor_map {0 -1}
	0x1a, 0x04, 0x08, 0x03, 0x08, 0x05, // param_split_shape {3 5}
	0x22, 0x04, 0x08, 0x00, 0x08, 0x03, // indices_offset {0 3}
	0x28, 0x00, // field: 0
}

func TestDecodeMindSporeBytes(t *testing.T) {
	data := append(append([]byte{}, mindSporeBytes...), oldMindSporeLayout...)
	got, err := DecodeStrategyFile("mindspore.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	want := &StrategyFile{
		CurrentStage: 0,
		Operators:    map[string][][]int{"MatMul-op0": {{1, 1}, {1, 2}}},
		Layouts: map[string]TensorLayout{
			"fc.weight": {DeviceMatrix: []int{4, 1, 1, 2}, TensorMap: []int{-1, 0}},
			"embedding": {DeviceMatrix: []int{4, 2}, TensorMap: []int{0, -1}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 3}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	// mspipe writes the same bytes MindSpore does.
	written, err := EncodeStrategyFile(&StrategyFile{Operators: want.Operators, Layouts: map[string]TensorLayout{"fc.weight": want.Layouts["fc.weight"]}}, FormatProto)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(written, mindSporeBytes) {
		t.Fatalf("mspipe wrote\n% x\nMindSpore writes\n% x", written, mindSporeBytes)
	}
}

func TestValidCorpusFormsAgree(t *testing.T) {
	fromProto, err := ReadStrategyFile("testdata/strategy/valid/semi_auto_8.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := ReadStrategyFile("testdata/strategy/valid/semi_auto_8.json")
	if err != nil {
		t.Fatal(err)
	}
	if fromProto.Devices() != 8 || fromJSON.Devices() != 8 {
		t.Fatalf("devices %d and %d, want 8", fromProto.Devices(), fromJSON.Devices())
	}
	for _, name := range []string{"weight", "embedding_table"} {
		p, j := fromProto.Layouts[name], fromJSON.Layouts[name]
		shape := j.Shape
		j.Shape = nil
		if !reflect.DeepEqual(p, j) {
			t.Errorf("%s: protobuf %+v, JSON %+v", name, p, j)
		}
		if _, err := p.Boxes(shape); err != nil {
			t.Errorf("%s: boxes of the JSON's shape %v from the protobuf layout: %v", name, shape, err)
		}
	}
	op := "Default/network-SemiAutoParallelNet/MatMul-op0"
	if !reflect.DeepEqual(fromProto.Operators[op], [][]int{{1, 1}, {1, 2}}) || !reflect.DeepEqual(fromJSON.Operators[op], [][]int{{1, 1}, {1, 2}}) {
		t.Errorf("%s: protobuf %v, JSON %v, want [[1 1] [1 2]]", op, fromProto.Operators[op], fromJSON.Operators[op])
	}
}

func TestStrategyFileValidate(t *testing.T) {
	even := TensorLayout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, 0}}
	for _, tc := range []struct {
		name string
		file StrategyFile
		want string
		is   error
	}{
		{"device counts differ", StrategyFile{Layouts: map[string]TensorLayout{"a": even, "b": {DeviceMatrix: []int{4}, TensorMap: []int{0}}}},
			"parameter b: device matrix [4] has 4 devices, parameter a's has 8", ErrLayout},
		{"operator does not divide", StrategyFile{Operators: map[string][][]int{"MatMul-op0": {{3, 1}}}, Layouts: map[string]TensorLayout{"a": even}},
			"operator MatMul-op0 input 0: invalid shard strategy: [3 1] uses 3 devices, which does not divide the stage's 8", ErrStrategy},
		{"operator zero split", StrategyFile{Operators: map[string][][]int{"Mul-op1": {{0}}}},
			"operator Mul-op1 input 0", ErrStrategy},
		{"unnamed layout", StrategyFile{Layouts: map[string]TensorLayout{"": even}}, "without a parameter name", ErrStrategyFile},
		{"negative stage", StrategyFile{CurrentStage: -1}, "current_stage -1", ErrStrategyFile},
		{"empty device matrix", StrategyFile{Layouts: map[string]TensorLayout{"a": {}}}, "parameter a: invalid layout: device matrix []", ErrLayout},
		{"tensor map axis twice", StrategyFile{Layouts: map[string]TensorLayout{"a": {DeviceMatrix: []int{2, 2}, TensorMap: []int{0, 0}}}}, "splits two dimensions", ErrLayout},
		{"uneven overlap", StrategyFile{Layouts: map[string]TensorLayout{"e": {DeviceMatrix: []int{2}, TensorMap: []int{0}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 2}}}},
			"parameter e: invalid layout: indices_offset [0 2]: slice 1 starts at 2, inside the slices before it (they end at 3)", ErrLayout},
		{"uneven gap", StrategyFile{Layouts: map[string]TensorLayout{"e": {DeviceMatrix: []int{2}, TensorMap: []int{0}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 4}}}},
			"leaving rows 3 to 3 in no slice", ErrLayout},
		{"uneven count", StrategyFile{Layouts: map[string]TensorLayout{"e": {DeviceMatrix: []int{4}, TensorMap: []int{0}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 3}}}},
			"has 2 slices", ErrLayout},
		{"uneven not starting at 0", StrategyFile{Layouts: map[string]TensorLayout{"e": {DeviceMatrix: []int{2}, TensorMap: []int{0}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{1, 4}}}},
			"slice 0 starts at 1", ErrLayout},
		{"opt step", StrategyFile{Layouts: map[string]TensorLayout{"w": {DeviceMatrix: []int{4, 2}, TensorMap: []int{0}, OptWeightShardStep: 4, OptWeightShardSize: 2}}},
			"opt_weight_shard_step 4, but the tensor map cuts the tensor into 2 slices", ErrLayout},
		{"opt size does not divide", StrategyFile{Layouts: map[string]TensorLayout{"w": {DeviceMatrix: []int{3, 2}, TensorMap: []int{0}, OptWeightShardStep: 2, OptWeightShardSize: 2}}},
			"does not divide the 6 devices", ErrLayout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.file.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want one containing %q wrapping %v", err, tc.want, tc.is)
			}
			// Nothing invalid is written, and nothing is left behind.
			dir := t.TempDir()
			if err := WriteStrategyFile(filepath.Join(dir, "s.ckpt"), &tc.file, FormatProto); err == nil {
				t.Fatal("WriteStrategyFile wrote an invalid file")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("failed write left %v", entries)
			}
		})
	}
}

// badStrategyFiles says what the error for each file of the bad corpus
// must say after "strategy file <path>": for the JSON form's reading
// errors, the line and column first.
var badStrategyFiles = map[string]string{
	"device_count_differs.ckpt":    "parameter fc.weight: device matrix [8] has 8 devices, parameter fc.bias's has 4",
	"device_count_differs.json":    "parameter b.weight: device matrix [2 2] has 4 devices, parameter a.weight's has 8",
	"device_matrix_zero.ckpt":      "parameter fc.weight: invalid layout: device matrix [2 0]",
	"duplicate_key.json":           `:2:123: parameter fc.weight: key "field" given twice`,
	"duplicate_parameter.ckpt":     "parameter fc.weight has two layouts",
	"duplicate_parameter.json":     `:3:3: parallel_layout_item: key "fc.weight" given twice`,
	"field_missing.ckpt":           "parameter fc.weight: invalid strategy file: field missing",
	"field_missing.json":           ":1:47: parameter fc.weight: field missing",
	"fractional.json":              ":1:75: parameter fc.weight dev_matrix: number 2.5 does not fit int",
	"negative_stage.json":          "current_stage -1",
	"null_device_matrix.json":      ":1:75: parameter fc.weight dev_matrix is null",
	"operator_missing_stage.json":  ":1:49: operator MatMul-op0: stage missing",
	"opt_shard_step.json":          "opt_weight_shard_step 4, but the tensor map cuts the tensor into 2 slices",
	"shape_not_divisible.json":     "dimension 1 of shape [8 10] is 10, not divisible into 4 slices",
	"stage_missing.json":           "current_stage missing",
	"strategy_not_dividing.ckpt":   "operator MatMul-op0 input 0: invalid shard strategy: [3 1] uses 3 devices",
	"tensor_map_out_of_range.ckpt": "parameter fc.weight: invalid layout: tensor map [2 -1]: entry 0 is 2",
	"tensor_map_twice.json":        "device matrix axis 1 splits two dimensions",
	"text.ckpt":                    "not a protobuf ParallelStrategyMap",
	"trailing_data.json":           "data after the JSON object",
	"truncated.ckpt":               "not a protobuf ParallelStrategyMap",
	"truncated.json":               ":4:67: operator Default/network-SemiAutoParallelNet/MatMul-op0: the JSON ends early",
	"two_device_matrices.ckpt":     "parameter fc.weight: invalid strategy file: 2 dev_matrix",
	"uneven_gap.json":              "slice 2 starts at 9, leaving rows 8 to 8 in no slice",
	"uneven_overlap.ckpt":          "parameter embedding: invalid layout: indices_offset [0 2 8 10]: slice 1 starts at 2",
	"uneven_overlap.json":          "slice 2 starts at 7, inside the slices before it (they end at 8)",
	"uneven_second_dimension.json": "splits dimension 1; an uneven split (param_split_shape) splits dimension 0 only",
	"uneven_sum.json":              "param_split_shape [3 5 2 6] adds up to 16 rows, the tensor [20 4] has 20",
	"uneven_without_offsets.json":  ":2:3: param_split_shape and indices_offset come together",
	"unknown_field.ckpt":           "ParallelStrategyMap has unknown field 4",
	"unknown_key.json":             `:2:55: parameter fc.weight: unknown key "tensor_shapes"`,
}

func TestBadStrategyCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/strategy/bad/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(badStrategyFiles) {
		t.Errorf("%d files in testdata/strategy/bad, %d in the table", len(files), len(badStrategyFiles))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := badStrategyFiles[name]
			if !ok {
				t.Fatalf("no expected error for %s", name)
			}
			f, err := ReadStrategyFile(path)
			if err == nil {
				t.Fatalf("accepted: %+v", f)
			}
			msg, where := err.Error(), path
			if strings.HasPrefix(want, ":") { // a position
				pos, rest, _ := strings.Cut(want[1:], ": ")
				where, want = path+":"+pos, rest
			}
			if !strings.HasPrefix(msg, "strategy file "+where+": ") || !strings.Contains(msg, want) {
				t.Fatalf("error %q\nwant it to name %s and contain %q", msg, where, want)
			}
			if !errors.Is(err, ErrStrategyFile) && !errors.Is(err, ErrLayout) && !errors.Is(err, ErrStrategy) {
				t.Fatalf("error %v wraps none of the package's sentinels", err)
			}
		})
	}
}

func TestReadStrategyFileRefusesDirectoryAndMissing(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{dir, filepath.Join(dir, "missing.ckpt")} {
		if _, err := ReadStrategyFile(path); err == nil || !strings.Contains(err.Error(), "read strategy file "+path) {
			t.Errorf("ReadStrategyFile(%s) = %v, want an error naming it", path, err)
		}
	}
}
