package parallel

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// stageFile is the strategy file stage s of a two-stage job writes: each
// stage's own operator and weight on 4 devices, and a weight both share.
func stageFile(s int) *StrategyFile {
	op := []string{"Stage0/MatMul-op0", "Stage1/MatMul-op1"}[s]
	w := []string{"layer0.weight", "layer1.weight"}[s]
	return &StrategyFile{
		CurrentStage: s,
		Operators:    map[string][][]int{op: {{1, 2}, {2, 1}}},
		Layouts: map[string]TensorLayout{
			w:           {DeviceMatrix: []int{2, 2}, TensorMap: []int{0, -1}, OptWeightShardStep: 2, OptWeightShardSize: 2},
			"embedding": {DeviceMatrix: []int{2, 2}, TensorMap: []int{-1, 0}},
		},
	}
}

func writeStage(t *testing.T, dir, name string, f *StrategyFile, format StrategyFormat) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := WriteStrategyFile(p, f, format); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStageFieldsRoundTrip(t *testing.T) {
	merged := &StrategyFile{
		CurrentStage:   0,
		Operators:      map[string][][]int{"a": {{2, 1}}, "b": {{1, 2}}, "c": {{1, 1}}},
		OperatorStages: map[string]int{"b": 1, "c": 3},
		Layouts:        map[string]TensorLayout{"w": {DeviceMatrix: []int{2}, TensorMap: []int{0, -1}}},
	}
	for _, format := range []StrategyFormat{FormatProto, FormatJSON} {
		data, err := EncodeStrategyFile(merged, format)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeStrategyFile("merged", data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, merged) {
			t.Fatalf("%v: read back %+v, want %+v", format, got, merged)
		}
		if s := got.Stages(); !reflect.DeepEqual(s, []int{0, 1, 3}) {
			t.Fatalf("%v: stages %v, want [0 1 3]", format, s)
		}
	}
	// A stage-1 file as MindSpore writes it: every operator of stage 1.
	data := []byte(`{"current_stage": 1, "parallel_strategy_item": {"op": {"stage": 1, "parallel_strategy": [[2, 1]]}},
	  "parallel_layout_item": {"w": {"dev_matrix": [2], "tensor_map": [0, -1], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}`)
	f, err := DecodeStrategyFile("stage1.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.CurrentStage != 1 || f.OperatorStages != nil || f.OperatorStage("op") != 1 {
		t.Fatalf("stage-1 file read as current %d, operator stages %v", f.CurrentStage, f.OperatorStages)
	}
	bad := &StrategyFile{Operators: map[string][][]int{"a": {{1}}}, OperatorStages: map[string]int{"ghost": 1}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "operator ghost, which has no strategy") {
		t.Fatalf("stage of a missing operator: %v", err)
	}
	neg := &StrategyFile{Operators: map[string][][]int{"a": {{1}}}, OperatorStages: map[string]int{"a": -2}}
	if err := neg.Validate(); err == nil || !strings.Contains(err.Error(), "operator a stage -2") {
		t.Fatalf("negative operator stage: %v", err)
	}
}

func TestMergeStrategies(t *testing.T) {
	dir := t.TempDir()
	// One file per rank, as MindSpore writes them: ranks 0-3 stage 0 and
	// 4-7 stage 1, in both forms.
	for r := range 8 {
		format := FormatProto
		if r%2 == 1 {
			format = FormatJSON
		}
		writeStage(t, dir, "strategy_rank"+string(rune('0'+r))+".ckpt", stageFile(r/4), format)
	}
	got, err := ReadStrategies(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Stages(), []int{0, 1}) || got.CurrentStage != 0 {
		t.Fatalf("merged stages %v current %d", got.Stages(), got.CurrentStage)
	}
	if got.OperatorStage("Stage0/MatMul-op0") != 0 || got.OperatorStage("Stage1/MatMul-op1") != 1 {
		t.Fatalf("operator stages %v", got.OperatorStages)
	}
	wantStages := map[string][]int{"layer0.weight": {0}, "layer1.weight": {1}, "embedding": {0, 1}}
	if !reflect.DeepEqual(got.ParamStages, wantStages) {
		t.Fatalf("param stages %v, want %v", got.ParamStages, wantStages)
	}
	if len(got.Layouts) != 3 || got.Devices() != 4 {
		t.Fatalf("merged %d layouts on %d devices", len(got.Layouts), got.Devices())
	}
	// Written and read back, the merged file keeps the operators' stages.
	out := filepath.Join(t.TempDir(), "merged.ckpt")
	if err := WriteStrategyFile(out, got, FormatProto); err != nil {
		t.Fatal(err)
	}
	back, err := ReadStrategies(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Stages(), []int{0, 1}) || back.ParamStages != nil || len(back.Layouts) != 3 {
		t.Fatalf("merged file read back: stages %v, param stages %v", back.Stages(), back.ParamStages)
	}
	// Files given one by one merge the same way.
	one, err := ReadStrategies(filepath.Join(dir, "strategy_rank0.ckpt"), filepath.Join(dir, "strategy_rank5.ckpt"))
	if err != nil || !reflect.DeepEqual(one.ParamStages, wantStages) {
		t.Fatalf("two files: %v, %v", one, err)
	}
}

func TestMergeStrategiesRefusesConflicts(t *testing.T) {
	named := func(pairs ...any) []NamedStrategy {
		var out []NamedStrategy
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, NamedStrategy{Name: pairs[i].(string), File: pairs[i+1].(*StrategyFile)})
		}
		return out
	}
	otherEmbedding := stageFile(1)
	otherEmbedding.Layouts["embedding"] = TensorLayout{DeviceMatrix: []int{2, 2}, TensorMap: []int{0, -1}}
	sameStageDiffers := stageFile(0)
	sameStageDiffers.Operators["Stage0/MatMul-op0"] = [][]int{{2, 2}, {2, 1}}
	eightDevices := stageFile(1)
	eightDevices.Layouts = map[string]TensorLayout{"layer1.weight": {DeviceMatrix: []int{8}, TensorMap: []int{0, -1}}}
	alreadyMerged, err := MergeStrategies(named("s0", stageFile(0), "s1", stageFile(1)))
	if err != nil {
		t.Fatal(err)
	}
	opConflict := stageFile(1)
	opConflict.Operators["Stage0/MatMul-op0"] = [][]int{{4, 1}, {1, 1}}
	for _, tc := range []struct {
		name  string
		files []NamedStrategy
		want  string
	}{
		{"layout conflict", named("a.ckpt", stageFile(0), "b.ckpt", otherEmbedding),
			"parameter embedding has layout dev_matrix [2 2] tensor_map [-1 0] in a.ckpt and dev_matrix [2 2] tensor_map [0 -1] in b.ckpt"},
		{"same stage differs", named("r0.ckpt", stageFile(0), "r1.ckpt", sameStageDiffers, "r4.ckpt", stageFile(1)),
			"r0.ckpt and r1.ckpt both claim stage 0 but differ (operator Stage0/MatMul-op0: strategy [[1 2] [2 1]] against [[2 2] [2 1]])"},
		{"missing stage", named("s1.ckpt", stageFile(1)), "stage 0 missing: the files hold stages [1] (stage 1 from s1.ckpt)"},
		{"missing middle stage", named("s0.ckpt", stageFile(0), "s2.ckpt", &StrategyFile{CurrentStage: 2}), "stage 1 missing"},
		{"devices differ", named("s0.ckpt", stageFile(0), "s1.ckpt", eightDevices), "s1.ckpt (stage 1) lays its parameters on 8 devices, s0.ckpt on 4"},
		{"merged input", named("m.ckpt", alreadyMerged), "m.ckpt holds stages [0 1]: it is already a merged file"},
		{"operator conflict", named("s0.ckpt", stageFile(0), "s1.ckpt", opConflict), "operator Stage0/MatMul-op0 has strategy [[1 2] [2 1]] in s0.ckpt and [[4 1] [1 1]] in s1.ckpt"},
		{"none", nil, "no strategy files to merge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MergeStrategies(tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
			if !errors.Is(err, ErrStrategyFile) && !errors.Is(err, ErrLayout) {
				t.Fatalf("error %v wraps neither ErrStrategyFile nor ErrLayout", err)
			}
		})
	}
}

func TestReadStrategiesDirectory(t *testing.T) {
	empty := t.TempDir()
	if err := os.Mkdir(filepath.Join(empty, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStrategies(empty); err == nil || !strings.Contains(err.Error(), "holds no strategy file") {
		t.Fatalf("empty directory: %v", err)
	}
	withFifo := t.TempDir()
	writeStage(t, withFifo, "s0.ckpt", stageFile(0), FormatProto)
	if err := syscall.Mkfifo(filepath.Join(withFifo, "s1.ckpt"), 0o600); err != nil {
		t.Skip("no fifo:", err)
	}
	if _, err := ReadStrategies(withFifo); err == nil || !strings.Contains(err.Error(), "s1.ckpt is not a regular file") {
		t.Fatalf("fifo in the directory: %v", err)
	}
	notStrategy := t.TempDir()
	writeStage(t, notStrategy, "s0.ckpt", stageFile(0), FormatProto)
	if err := os.WriteFile(filepath.Join(notStrategy, "README"), []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStrategies(notStrategy); err == nil || !strings.Contains(err.Error(), "README") {
		t.Fatalf("a non-strategy file in the directory: %v", err)
	}
}
