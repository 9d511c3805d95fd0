package reshard_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins/sdk/sdktest"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/stages/ckpt/reshard"
)

func run(t *testing.T, with map[string]any) (map[string]any, []plugins.Event, error) {
	t.Helper()
	r := sdktest.Run(context.Background(), t, reshard.New(), plugins.RunRequest{StageID: "reshard", With: with})
	return r.Outputs, r.Events(), r.Err
}

// integrated writes a whole checkpoint as ckpt/integrate leaves it: the
// seeds' [8, 8] weight (element i is i), its moments, a scalar.
func integrated(t *testing.T) (string, []ckpt.Tensor) {
	t.Helper()
	w, m := make([]float32, 64), make([]float32, 64)
	for i := range w {
		w[i], m[i] = float32(i), float32(i)/2
	}
	wt, _ := ckpt.NewFloat32("weight", []int64{8, 8}, w)
	mt, _ := ckpt.NewFloat32("moments.weight", []int64{8, 8}, m)
	lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
	tensors := []ckpt.Tensor{wt, mt, lr}
	path := filepath.Join(t.TempDir(), "CKP-2_8.ckpt")
	if err := ckpt.Write(path, tensors, ckpt.WriteOptions{CRC: true}); err != nil {
		t.Fatal(err)
	}
	return path, tensors
}

func TestDescribeAndValidate(t *testing.T) {
	d, err := reshard.New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range d.Outputs {
		outs = append(outs, o.Name+":"+o.Type)
	}
	if d.Name != "ckpt/reshard" || strings.Join(outs, " ") != "checkpoints:path strategy:path manifest:path devices:int" {
		t.Errorf("declaration %s with outputs %v", d.Name, outs)
	}
	for _, tc := range []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"from": "/x", "devices": 4, "bn_stats": "mean", "max_memory": "1GiB"}, ""},
		{map[string]any{"from": "/x", "devices": 4, "strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}}, "/strategy: strategy describes the next training's layout: give its model too"},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "semi_auto_parallel", "strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}}, ""},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "auto_parallel"}, "/mode: auto_parallel searches its strategy when the job starts"},
		{map[string]any{"from": "/x", "devices": 4, "model": "cnn", "target_strategy": "s.ckpt"}, "/target_strategy: give the target as model"},
		{map[string]any{"from": "/x", "devices": 4, "format": "ckpt"}, `unknown field "format"`},
	} {
		problems, err := reshard.New().Validate(context.Background(), plugins.ValidateRequest{With: tc.with})
		if err != nil {
			t.Fatal(err)
		}
		if got := plugins.JoinProblems(problems); !strings.Contains(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%v: problems %q, want %q", tc.with, got, tc.want)
		}
	}
}

// TestReshardIntegratedForTwoDevices: an integrated checkpoint (no layout:
// everything replicated) for 2 devices, in the layout npu/train's init:
// reads, with a strategy file and a manifest.
func TestReshardIntegratedForTwoDevices(t *testing.T) {
	path, tensors := integrated(t)
	out, events, err := run(t, map[string]any{"from": path, "devices": 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := out["checkpoints"].(string)
	if out["devices"] != 2 || out["strategy"] != filepath.Join(dir, "strategy.ckpt") || out["manifest"] != filepath.Join(dir, "manifest.json") {
		t.Fatalf("outputs %v", out)
	}
	files, err := ckptset.Find(dir, "")
	if err != nil || len(files) != 2 || filepath.Base(files[1]) != "CKP-2_8.ckpt" {
		t.Fatalf("set %v: %v", files, err)
	}
	for _, f := range files {
		got, err := ckpt.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := ckpt.Compare(tensors, got.Tensors); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// By default plain protobuf, as MindSpore saves: stock protoc
		// decodes it against checkpoint.proto.
		if vals := ckpttest.DecodeFile(t, f); got.CRC || len(vals) != got.Values {
			t.Fatalf("%s: crc_num trailer %v, protoc decoded %d values of %d", f, got.CRC, len(vals), got.Values)
		}
	}
	withCRC, _, err := run(t, map[string]any{"from": path, "devices": 2, "crc_check": true})
	if err != nil {
		t.Fatal(err)
	}
	crcFiles, err := ckptset.Find(withCRC["checkpoints"].(string), "")
	if err != nil {
		t.Fatal(err)
	}
	if f, err := ckpt.ReadFile(crcFiles[0]); err != nil || !f.CRC {
		t.Fatalf("crc_check: true wrote no trailer (%v)", err)
	}
	sf, err := parallel.ReadStrategyFile(out["strategy"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if l := sf.Layouts["weight"]; !reflect.DeepEqual(l.DeviceMatrix, []int{2}) || !reflect.DeepEqual(l.TensorMap, []int{-1, -1}) || len(sf.Layouts) != 1 {
		t.Fatalf("target strategy %+v", sf.Layouts)
	}
	var progressed bool
	for _, e := range events {
		progressed = progressed || (e.Progress != nil && e.Progress.Done == e.Progress.Total && e.Progress.Total > 0)
	}
	if !progressed {
		t.Fatal("no final progress event")
	}
}

// TestReshardSetToStrategy: a 4-rank set split along dimension 0 to the
// 2-device layout of a target strategy file, then that output (read through
// its manifest) to 1 device: the whole tensors back.
func TestReshardSetToStrategy(t *testing.T) {
	path, tensors := integrated(t)
	src := t.TempDir()
	for r := range 4 {
		var slice []ckpt.Tensor
		for _, x := range tensors[:2] {
			slice = append(slice, ckpt.Tensor{Name: x.Name, DType: x.DType, Dims: []int64{2, 8}, Data: x.Data[r*64 : (r+1)*64]})
		}
		if _, err := ckptset.WriteRank(src, r, "CKP-2_8.ckpt", append(slice, tensors[2])); err != nil {
			t.Fatal(err)
		}
	}
	four := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{4}, TensorMap: []int{0, -1}}}}
	if err := parallel.WriteStrategyFile(filepath.Join(src, "strategy.json"), four, parallel.FormatJSON); err != nil {
		t.Fatal(err)
	}
	twoCols := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{2}, TensorMap: []int{-1, 0}}}}
	target := filepath.Join(t.TempDir(), "target.ckpt")
	if err := parallel.WriteStrategyFile(target, twoCols, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, map[string]any{"from": src, "devices": 4, "target_strategy": target}); err == nil || !strings.Contains(err.Error(), "is for 2 devices, devices is 4") {
		t.Fatalf("devices mismatch: %v", err)
	}
	out, _, err := run(t, map[string]any{"from": src, "devices": 2, "target_strategy": target})
	if err != nil {
		t.Fatal(err)
	}
	dir := out["checkpoints"].(string)
	r1, err := ckpt.Read(ckptset.FilePath(dir, 1, "CKP-2_8.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := r1[0].Float32s()
	if !reflect.DeepEqual(r1[0].Dims, []int64{8, 4}) || w[0] != 4 || w[4] != 12 {
		t.Fatalf("rank 1 holds columns 4-7: dims %v, %v", r1[0].Dims, w[:8])
	}
	if m, _ := r1[1].Float32s(); !reflect.DeepEqual(r1[1].Dims, []int64{8, 4}) || m[0] != 2 {
		t.Fatalf("moments follow weight: %v %v", r1[1].Dims, m[:4])
	}

	back, _, err := run(t, map[string]any{"from": dir, "devices": 1})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := ckptset.Find(back["checkpoints"].(string), "")
	got, err := ckpt.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Compare(tensors, got); err != nil {
		t.Fatalf("4 -> 2 -> 1 is not the whole checkpoint: %v (from %s)", err, path)
	}
}
