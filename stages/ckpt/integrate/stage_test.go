package integrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/bytesize"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk/sdktest"
	"github.com/mspipe/mspipe/stages/ckpt/integrate"
)

// writeSet writes the seeds' 4-device example as a training stage leaves
// it: weight [8, 8] (element i is i) and its moments as [2, 8] slices, per
// device BatchNorm means, the learning rate; strategy.ckpt beside it when
// withStrategy.
func writeSet(t *testing.T, withStrategy bool) string {
	t.Helper()
	root := t.TempDir()
	for r := range 4 {
		vals, mom := make([]float32, 16), make([]float32, 16)
		for i := range vals {
			vals[i], mom[i] = float32(r*16+i), -float32(r*16+i)-0.5
		}
		w, _ := ckpt.NewFloat32("weight", []int64{2, 8}, vals)
		m, _ := ckpt.NewFloat32("moments.weight", []int64{2, 8}, mom)
		bn, _ := ckpt.NewFloat32("bn.moving_mean", []int64{2}, []float32{float32(r), 1})
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
		if _, err := ckptset.WriteRank(root, r, "CKP-2_8.ckpt", []ckpt.Tensor{w, m, bn, lr}); err != nil {
			t.Fatal(err)
		}
	}
	if withStrategy {
		sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{4, 1}, TensorMap: []int{1, 0}}}}
		if err := parallel.WriteStrategyFile(filepath.Join(root, "strategy.ckpt"), sf, parallel.FormatProto); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func run(t *testing.T, with map[string]any) (map[string]any, []plugins.Event, error) {
	t.Helper()
	r := sdktest.Run(context.Background(), t, integrate.New(), plugins.RunRequest{StageID: "integrate", With: with})
	return r.Outputs, r.Events(), r.Err
}

func values(t *testing.T, tensors []ckpt.Tensor, name string) []float32 {
	t.Helper()
	for _, x := range tensors {
		if x.Name == name {
			v, err := x.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no tensor %q", name)
	return nil
}

func TestDescribe(t *testing.T) {
	d, err := integrate.New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range d.Outputs {
		outs = append(outs, o.Name+":"+o.Type)
	}
	if d.Name != "ckpt/integrate" || strings.Join(outs, " ") != "checkpoint:path manifest:path tensors:int bytes:int" {
		t.Errorf("declaration %s with outputs %v", d.Name, outs)
	}
	var schema struct {
		Required   []string                  `json:"required"`
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(d.WithSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(schema.Required, []string{"from"}) || schema.Properties["bn_stats"]["default"] != "rank0" || schema.Properties["format"]["default"] != "ckpt" {
		t.Errorf("schema %s", d.WithSchema)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"from": "/x", "format": "safetensors", "bn_stats": "mean", "max_memory": "64MiB"}, ""},
		{map[string]any{"from": "/x", "devices": 2}, `unknown field "devices"`},
		{map[string]any{"from": "/x", "max_memory": "lots"}, `"lots": want a positive size`},
	} {
		problems, err := integrate.New().Validate(context.Background(), plugins.ValidateRequest{With: tc.with})
		if err != nil {
			t.Fatal(err)
		}
		if got := plugins.JoinProblems(problems); !strings.Contains(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%v: problems %q, want %q", tc.with, got, tc.want)
		}
	}
}

// TestIntegrateSeedsExample merges the seeds' slices with the strategy file
// found beside them: the [8, 8] weight and its moments, whole and in order.
func TestIntegrateSeedsExample(t *testing.T) {
	root := writeSet(t, true)
	out, events, err := run(t, map[string]any{"from": root})
	if err != nil {
		t.Fatal(err)
	}
	path := out["checkpoint"].(string)
	if filepath.Base(path) != "CKP-2_8.ckpt" || out["tensors"] != 4 || out["bytes"] != int64(256+256+8+4) {
		t.Fatalf("outputs %v", out)
	}
	f, err := ckpt.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.CRC || f.Tensors[0].Name != "weight" || !reflect.DeepEqual(f.Tensors[0].Dims, []int64{8, 8}) {
		t.Fatalf("merged file: crc %v (want none by default), first tensor %s %v", f.CRC, f.Tensors[0].Name, f.Tensors[0].Dims)
	}
	if vals := ckpttest.DecodeFile(t, path); len(vals) != f.Values {
		t.Fatalf("protoc decoded %d values, ckpt %d", len(vals), f.Values)
	}
	withCRC, _, err := run(t, map[string]any{"from": root, "crc_check": true})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := ckpt.ReadFile(withCRC["checkpoint"].(string)); err != nil || !g.CRC {
		t.Fatalf("crc_check: true wrote no trailer (%v)", err)
	}
	w, m := values(t, f.Tensors, "weight"), values(t, f.Tensors, "moments.weight")
	for i := range 64 {
		if w[i] != float32(i) || m[i] != -float32(i)-0.5 {
			t.Fatalf("element %d: weight %v moments %v", i, w[i], m[i])
		}
	}
	if bn := values(t, f.Tensors, "bn.moving_mean"); bn[0] != 0 {
		t.Fatalf("bn.moving_mean %v, want rank 0's", bn)
	}
	if _, err := reshard.Verify(context.Background(), filepath.Dir(path), reshard.Options{}); err != nil || out["manifest"] != filepath.Join(filepath.Dir(path), "manifest.json") {
		t.Fatalf("manifest %v: %v", out["manifest"], err)
	}
	var logs []string
	var last *plugins.ProgressEvent
	artifact := false
	for _, e := range events {
		if e.Log != nil {
			logs = append(logs, e.Log.Message)
		}
		if e.Progress != nil {
			last = e.Progress
		}
		artifact = artifact || (e.Artifact != nil && e.Artifact.Name == "checkpoint")
	}
	st, _ := os.Stat(path)
	// Bytes in and out: the merged file is smaller than the four slices
	// together (one copy of the replicated tensors instead of four).
	summary := fmt.Sprintf(" in (4 files), %s out (1 file), out/in 0.6", bytesize.Format(st.Size()))
	if len(logs) == 0 || !strings.Contains(logs[0], "integrating 4 ranks of "+root+" (layout from "+filepath.Join(root, "strategy.ckpt")+"): 1.0 KiB"+summary) {
		t.Fatalf("logs %q, want %q", logs, summary)
	}
	if last == nil || last.Done != last.Total || last.Total != st.Size() || last.Unit != "bytes" || !artifact {
		t.Fatalf("last progress %+v (file %d bytes), artifact %v", last, st.Size(), artifact)
	}
}

// TestIntegrateDataParallel: without a strategy file every tensor is
// replicated; bn_stats mean averages the devices' BatchNorm statistics and
// safetensors output is converted from the verified .ckpt.
func TestIntegrateDataParallel(t *testing.T) {
	root := writeSet(t, false)
	// A data-parallel set holds the same weights on every rank: make it so.
	files, _ := ckptset.Find(root, "")
	same, _ := ckpt.Read(files[0])
	for _, f := range files {
		ts, _ := ckpt.Read(f)
		ts[0], ts[1] = same[0], same[1]
		if err := ckpt.Write(f, ts, ckpt.WriteOptions{CRC: true}); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := run(t, map[string]any{"from": root, "bn_stats": "mean", "format": "safetensors"})
	if err != nil {
		t.Fatal(err)
	}
	path := out["checkpoint"].(string)
	if !strings.HasSuffix(path, "CKP-2_8.safetensors") {
		t.Fatalf("checkpoint %s", path)
	}
	st, err := ckpt.ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if bn := values(t, st.Tensors, "bn.moving_mean"); bn[0] != 1.5 || bn[1] != 1 {
		t.Fatalf("bn.moving_mean %v, want the mean [1.5 1]", bn)
	}
	if err := ckpt.Compare(same[:2], st.Tensors[:2]); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrateBadInput(t *testing.T) {
	root := writeSet(t, true)
	files, _ := ckptset.Find(root, "")
	if _, _, err := run(t, map[string]any{"from": files[0]}); err == nil || !strings.Contains(err.Error(), "is a file; give the training's checkpoints directory") {
		t.Errorf("from a file: %v", err)
	}
	if _, _, err := run(t, map[string]any{"from": filepath.Join(root, "nope")}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing from: %v", err)
	}
	data, _ := os.ReadFile(files[1])
	os.WriteFile(files[1], data[:len(data)-30], 0o644)
	if _, _, err := run(t, map[string]any{"from": root}); err == nil || !strings.Contains(err.Error(), files[1]) {
		t.Errorf("truncated rank 1: %v", err)
	}
	os.RemoveAll(filepath.Join(root, "device2"))
	if _, _, err := run(t, map[string]any{"from": root}); err == nil || !strings.Contains(err.Error(), "rank 2 is missing") {
		t.Errorf("missing rank: %v", err)
	}
}
