package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

func runCkpt(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), append([]string{"ckpt"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// inspectFixture writes a small checkpoint with float, int, half, NaN and Inf
// tensors, sliced and CRC-protected, and returns its path and tensors.
func inspectFixture(t *testing.T) (string, []ckpt.Tensor) {
	t.Helper()
	vals := make([]float32, 12)
	for i := range vals {
		vals[i] = float32(i)*0.25 - 1 // -1 ... 1.75, mean 0.375
	}
	w, _ := ckpt.NewFloat32("fc.weight", []int64{3, 4}, vals)
	lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
	step := ckpt.Tensor{Name: "global_step", Dims: []int64{1}, DType: ckpt.DTypeInt32, Data: []byte{7, 0, 0, 0}}
	half := ckpt.Tensor{Name: "h", Dims: []int64{2}, DType: ckpt.DTypeFloat16, Data: []byte{0x00, 0x3c, 0x00, 0xc0}} // 1, -2
	nan, _ := ckpt.NewFloat32("nan", []int64{2}, []float32{1, float32(math.NaN())})
	inf, _ := ckpt.NewFloat32("inf", []int64{2}, []float32{float32(math.Inf(1)), 3})
	f64 := ckpt.Tensor{Name: "d", Dims: []int64{1}, DType: ckpt.DTypeFloat64, Data: make([]byte, 8)}
	binary.LittleEndian.PutUint64(f64.Data, math.Float64bits(0.1))
	tensors := []ckpt.Tensor{w, lr, step, half, nan, inf, f64}
	path := filepath.Join(t.TempDir(), "CKP-1_4.ckpt")
	if err := ckpt.Write(path, tensors, ckpt.WriteOptions{SliceBytes: 16, CRC: true}); err != nil {
		t.Fatal(err)
	}
	return path, tensors
}

func TestCkptInspectText(t *testing.T) {
	path, tensors := inspectFixture(t)
	code, stdout, stderr := runCkpt(t, "inspect", path)
	if code != ExitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	h := func(i int) string { return tensors[i].Hash()[:12] }
	want := "file: " + path + "\n" +
		// fc.weight is 48 bytes over a 16-byte limit: 3 values, 9 in all.
		"tensors: 7, values: 9, data bytes: 84, crc32: verified\n\n" +
		"NAME           DTYPE    SHAPE   BYTES  SHA256        MIN   MAX   MEAN\n" +
		"fc.weight      Float32  (3, 4)  48     " + h(0) + "  -1    1.75  0.375\n" +
		"learning_rate  Float32  ()      4      " + h(1) + "  0.01  0.01  0.01\n" +
		"global_step    Int32    (1,)    4      " + h(2) + "  -     -     -\n" +
		"h              Float16  (2,)    4      " + h(3) + "  -2    1     -0.5\n" +
		"nan            Float32  (2,)    8      " + h(4) + "  NaN   NaN   NaN\n" +
		"inf            Float32  (2,)    8      " + h(5) + "  3     +Inf  +Inf\n" +
		"d              Float64  (1,)    8      " + h(6) + "  0.1   0.1   0.1\n"
	if stdout != want {
		t.Fatalf("output:\n%q\nwant:\n%q", stdout, want)
	}
}

func TestCkptInspectJSON(t *testing.T) {
	path, tensors := inspectFixture(t)
	code, stdout, stderr := runCkpt(t, "inspect", "--format", "json", path)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		File    string `json:"file"`
		Values  int    `json:"values"`
		CRC     bool   `json:"crc32"`
		Tensors []struct {
			Name   string           `json:"name"`
			DType  string           `json:"dtype"`
			Shape  []int64          `json:"shape"`
			Bytes  int              `json:"bytes"`
			SHA256 string           `json:"sha256"`
			Stats  *json.RawMessage `json:"stats"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	if got.File != path || got.Values != 9 || !got.CRC || len(got.Tensors) != len(tensors) {
		t.Fatalf("header = %+v", got)
	}
	for i, tt := range got.Tensors {
		if tt.Name != tensors[i].Name || tt.SHA256 != tensors[i].Hash() || tt.Bytes != len(tensors[i].Data) || tt.Shape == nil {
			t.Fatalf("tensor %d = %+v, want %s with its full hash and a non-null shape", i, tt, tensors[i].Name)
		}
	}
	stats := func(i int) string {
		if got.Tensors[i].Stats == nil {
			return "null"
		}
		return string(*got.Tensors[i].Stats)
	}
	for i, want := range map[int]string{
		0: `{"min": -1, "max": 1.75, "mean": 0.375}`,
		1: `{"min": 0.01, "max": 0.01, "mean": 0.01}`,
		2: `null`,
		4: `{"min": "NaN", "max": "NaN", "mean": "NaN"}`,
		5: `{"min": 3, "max": "+Inf", "mean": "+Inf"}`,
	} {
		compact := strings.Join(strings.Fields(stats(i)), " ")
		compact = strings.ReplaceAll(strings.ReplaceAll(compact, "{ ", "{"), " }", "}")
		if compact != want {
			t.Fatalf("tensor %s stats = %s, want %s", tensors[i].Name, compact, want)
		}
	}
}

func TestCkptInspectErrors(t *testing.T) {
	dir := t.TempDir()
	path, _ := inspectFixture(t)
	data, _ := os.ReadFile(path)
	truncated := filepath.Join(dir, "truncated.ckpt")
	if err := os.WriteFile(truncated, data[:40], 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCkpt(t, "inspect", truncated)
	if code != ExitFailed || stdout != "" {
		t.Fatalf("truncated: exit %d, stdout %q; want 1 and no output", code, stdout)
	}
	want := "mspipe: " + truncated + `: tensor "fc.weight" (value[0] at byte 0): value: length 44 runs past the end (38 bytes left; file truncated?): malformed checkpoint` + "\n"
	if stderr != want {
		t.Fatalf("truncated: stderr %q, want %q", stderr, want)
	}

	wrong := "../../../../npu/ckpt/testdata/bad/wrong_length.ckpt"
	if code, _, stderr := runCkpt(t, "inspect", wrong); code != ExitFailed || !strings.Contains(stderr, wrong) || !strings.Contains(stderr, `tensor "fc.weight"`) {
		t.Fatalf("wrong length: exit %d, stderr %q; want 1 naming the file and the tensor", code, stderr)
	}

	missing := filepath.Join(dir, "missing.ckpt")
	if code, _, stderr := runCkpt(t, "inspect", missing); code != ExitUsage || !strings.Contains(stderr, "no such file") {
		t.Fatalf("missing file: exit %d, stderr %q; want 2", code, stderr)
	}
	if code, _, _ := runCkpt(t, "inspect", "--format", "yaml", path); code != ExitUsage {
		t.Fatalf("--format yaml: exit %d, want 2", code)
	}
	if code, _, _ := runCkpt(t, "inspect"); code != ExitUsage {
		t.Fatalf("no file: exit %d, want 2", code)
	}
}
