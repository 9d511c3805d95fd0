package reshard

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// The numbers of the seeds' save/load document: the 4-device stage 1,
// each rank holding a [2, 8] slice of weight and of moments.weight.
var seedWeight = [4][16]float32{
	{0.87537426, 1.0448935, 0.86736983, 0.8836905, 0.77354026, 0.69588304, 0.9183654, 0.7792076,
		0.87224025, 0.8726848, 0.771446, 0.81967723, 0.88974726, 0.7988162, 0.72919345, 0.7677011},
	{0.9210751, 0.9050457, 0.9827775, 0.920396, 0.9240526, 0.9750359, 1.0275179, 1.0819869,
		0.73605865, 0.84631145, 0.9746683, 0.9386582, 0.82902765, 0.83565056, 0.9702136, 1.0514659},
	{1.0108461, 0.8689414, 0.91719437, 0.8805056, 0.7994629, 0.8999671, 0.7585804, 1.0287056,
		0.90653455, 0.60146594, 0.7206475, 0.8306303, 0.8364681, 0.89625114, 0.7354735, 0.8447268},
	{0.7147005, 0.9168278, 0.80178416, 0.6258351, 0.8413766, 0.5909515, 0.696347, 0.71359116,
		0.20506378, 0.03691584, 0.2454556, 0.12978578, 0.19065076, 0.23904312, 0.27509746, 0.34614682},
}

var seedMoments = [4][16]float32{
	{0.2567724, -0.07485991, 0.282002, 0.2456022, 0.454939, 0.619168, 0.18964815, 0.45714882,
		0.25946522, 0.24344791, 0.45677605, 0.3611395, 0.23378398, 0.41439137, 0.5312468, 0.4696194},
	{0.2417504, 0.28193963, 0.06713893, 0.21510397, 0.23380603, 0.11424308, 0.0218009, -0.11969765,
		0.45955992, 0.22664294, 0.01990281, 0.0731914, 0.27125207, 0.27298513, -0.01716102, -0.15327111},
	{0.03440702, 0.41419312, 0.24817684, 0.30765256, 0.48516113, 0.24904746, 0.57791173, 0.00955463,
		0.13458519, 0.6690533, 0.49259356, 0.28319967, 0.25951773, 0.16777472, 0.45696738, 0.24933104},
	{0.14152306, 0.5040985, 0.24455397, 0.10907605, 0.11319532, 0.19538902, 0.01208619, 0.40430856,
		-0.7773164, -0.47611716, -0.6041424, -0.6144473, -0.2651842, -0.31909415, -0.4510405, -0.12860501},
}

// seedMergedMoments is the integrated moments.weight the seeds print after
// running integrate_checkpoint.py.
var seedMergedMoments = []float32{
	0.2567724, -0.07485991, 0.282002, 0.2456022, 0.454939, 0.619168, 0.18964815, 0.45714882,
	0.25946522, 0.24344791, 0.45677605, 0.3611395, 0.23378398, 0.41439137, 0.5312468, 0.4696194,
	0.2417504, 0.28193963, 0.06713893, 0.21510397, 0.23380603, 0.11424308, 0.0218009, -0.11969765,
	0.45955992, 0.22664294, 0.01990281, 0.0731914, 0.27125207, 0.27298513, -0.01716102, -0.15327111,
	0.03440702, 0.41419312, 0.24817684, 0.30765256, 0.48516113, 0.24904746, 0.57791173, 0.00955463,
	0.13458519, 0.6690533, 0.49259356, 0.28319967, 0.25951773, 0.16777472, 0.45696738, 0.24933104,
	0.14152306, 0.5040985, 0.24455397, 0.10907605, 0.11319532, 0.19538902, 0.01208619, 0.40430856,
	-0.7773164, -0.47611716, -0.6041424, -0.6144473, -0.2651842, -0.31909415, -0.4510405, -0.12860501,
}

// seedMergedWeightTail is the last two rows of the integrated weight the
// seeds print. (Its first six rows do not equal the devices' slices in the
// document, which printed them at another point of training; rows 6-7 do,
// and the moments, printed consistently, match everywhere.)
var seedMergedWeightTail = []float32{
	0.7147005, 0.9168278, 0.80178416, 0.6258351, 0.8413766, 0.5909515, 0.696347, 0.71359116,
	0.20506378, 0.03691584, 0.2454556, 0.12978578, 0.19065076, 0.23904312, 0.27509746, 0.34614682,
}

func mustFloat32(t *testing.T, name string, dims []int64, v []float32) ckpt.Tensor {
	t.Helper()
	x, err := ckpt.NewFloat32(name, dims, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func floats(t *testing.T, x ckpt.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readTensors(t *testing.T, path string) map[string]ckpt.Tensor {
	t.Helper()
	ts, err := ckpt.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]ckpt.Tensor)
	for _, x := range ts {
		out[x.Name] = x
	}
	return out
}

// rowBoxes are n equal slices of rows of shape.
func rowBoxes(shape []int, n int) []parallel.Box {
	boxes := make([]parallel.Box, n)
	step := shape[0] / n
	for r := range boxes {
		b := wholeBox(shape)
		b.Offset[0], b.Shape[0] = r*step, step
		boxes[r] = b
	}
	return boxes
}

func seedSet(t *testing.T) (Source, []ckpt.Tensor) {
	t.Helper()
	dir := t.TempDir()
	var src Source
	for r := range 4 {
		tensors := []ckpt.Tensor{
			mustFloat32(t, "weight", []int64{2, 8}, seedWeight[r][:]),
			mustFloat32(t, "learning_rate", nil, []float32{0.01}),
			mustFloat32(t, "momentum", nil, []float32{0.9}),
			mustFloat32(t, "moments.weight", []int64{2, 8}, seedMoments[r][:]),
		}
		path := filepath.Join(dir, fmt.Sprintf("node%d", r), "CKP_1-4_32.ckpt")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := ckpt.Write(path, tensors, ckpt.WriteOptions{CRC: true}); err != nil {
			t.Fatal(err)
		}
		src.Files = append(src.Files, path)
	}
	src.Placements = map[string]Placement{"weight": {Shape: []int{8, 8}, Boxes: rowBoxes([]int{8, 8}, 4)}}
	var weight []float32
	for r := range 4 {
		weight = append(weight, seedWeight[r][:]...)
	}
	whole := []ckpt.Tensor{
		mustFloat32(t, "weight", []int64{8, 8}, weight),
		mustFloat32(t, "learning_rate", nil, []float32{0.01}),
		mustFloat32(t, "momentum", nil, []float32{0.9}),
		mustFloat32(t, "moments.weight", []int64{8, 8}, seedMergedMoments),
	}
	return src, whole
}

// TestSeedsFourDeviceExample is the seeds' scenario: four [2, 8] slices
// integrated to [8, 8], then split for two devices as [4, 8].
func TestSeedsFourDeviceExample(t *testing.T) {
	ctx := context.Background()
	src, whole := seedSet(t)
	out := t.TempDir()
	m, err := Merge(ctx, src, out, "CKP-Integrated_1-4_32.ckpt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(out, "CKP-Integrated_1-4_32.ckpt")
	got := readTensors(t, merged)
	if !slices.Equal(floats(t, got["moments.weight"]), seedMergedMoments) {
		t.Fatalf("merged moments.weight = %v, want the seeds' %v", floats(t, got["moments.weight"]), seedMergedMoments)
	}
	if w := floats(t, got["weight"]); !slices.Equal(w[48:], seedMergedWeightTail) || !slices.Equal(w, floats(t, whole[0])) {
		t.Fatalf("merged weight = %v, want the four slices in rank order", w)
	}
	if lr := floats(t, got["learning_rate"]); len(got["learning_rate"].Dims) != 0 || !slices.Equal(lr, []float32{0.01}) {
		t.Fatalf("learning_rate = %v %v, want the scalar 0.01", got["learning_rate"].Dims, lr)
	}
	// Same bytes, same order as one full checkpoint of those values (by
	// default without the crc_num trailer, as MindSpore saves).
	var want bytes.Buffer
	if err := ckpt.Encode(&want, whole, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(merged); !bytes.Equal(data, want.Bytes()) {
		t.Fatalf("merged file (%d bytes) differs from ckpt.Write of the whole tensors (%d bytes)", len(data), want.Len())
	}
	for i, x := range whole {
		if m.Tensors[i].Name != x.Name || m.Tensors[i].SHA256 != x.Hash() {
			t.Fatalf("manifest tensor %d = %s %s, want %s %s", i, m.Tensors[i].Name, m.Tensors[i].SHA256, x.Name, x.Hash())
		}
	}

	// Stage 2: two devices, weight and its moments split [4, 8] by rows,
	// from the integrated file and straight from the four slices.
	two := Target{Ranks: 2, Placements: map[string]Placement{"weight": {Shape: []int{8, 8}, Boxes: rowBoxes([]int{8, 8}, 2)}}}
	fromMerged := t.TempDir()
	if _, err := Run(ctx, Source{Files: []string{merged}}, two, fromMerged, Options{}); err != nil {
		t.Fatal(err)
	}
	direct := t.TempDir()
	if _, err := Run(ctx, src, TargetForDevices(src, 2), direct, Options{}); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		got := readTensors(t, filepath.Join(fromMerged, fmt.Sprintf("rank_%d.ckpt", r)))
		if mw := floats(t, got["moments.weight"]); !slices.Equal(mw, seedMergedMoments[32*r:32*(r+1)]) || !slices.Equal(got["moments.weight"].Dims, []int64{4, 8}) {
			t.Fatalf("device%d moments.weight = %v %v, want the seeds' [4 8] rows", r, got["moments.weight"].Dims, mw)
		}
		if w := floats(t, got["weight"]); !slices.Equal(w, floats(t, whole[0])[32*r:32*(r+1)]) {
			t.Fatalf("device%d weight = %v", r, w)
		}
		if m := floats(t, got["momentum"]); !slices.Equal(m, []float32{0.9}) {
			t.Fatalf("device%d momentum = %v, want 0.9", r, m)
		}
		a, _ := os.ReadFile(filepath.Join(fromMerged, fmt.Sprintf("rank_%d.ckpt", r)))
		b, _ := os.ReadFile(filepath.Join(direct, fmt.Sprintf("rank_%d.ckpt", r)))
		if !bytes.Equal(a, b) {
			t.Fatalf("rank %d: 4 -> 1 -> 2 and 4 -> 2 wrote different files", r)
		}
	}
	if _, err := Verify(ctx, direct, Options{}); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}
