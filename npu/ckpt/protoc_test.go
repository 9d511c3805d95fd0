package ckpt

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// protocPath finds the stock protobuf compiler. Without it the test skips,
// unless MSPIPE_REQUIRE_PROTOC=1 demands it (CI sets it where protoc is
// installed, so a lost install step fails loudly).
func protocPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("protoc")
	if err != nil {
		if os.Getenv("MSPIPE_REQUIRE_PROTOC") == "1" {
			t.Fatalf("protoc not found and MSPIPE_REQUIRE_PROTOC=1: %v", err)
		}
		t.Skipf("protoc not found (%v); install protobuf-compiler or set MSPIPE_REQUIRE_PROTOC=1 to make this a failure", err)
	}
	return p
}

func runProtoc(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(protocPath(t), append([]string{"--proto_path=proto"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("protoc %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// decodedValue is one Value as protoc prints it in text format.
type decodedValue struct {
	tag     string
	dims    []int64
	dtype   string
	content []byte
}

func parseProtocText(t *testing.T, text string) []decodedValue {
	t.Helper()
	var out []decodedValue
	for _, line := range strings.Split(text, "\n") {
		key, val, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch key {
		case "tag":
			out = append(out, decodedValue{tag: unescapeC(t, val)})
		case "dims":
			d, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				t.Fatalf("protoc dims %q: %v", val, err)
			}
			out[len(out)-1].dims = append(out[len(out)-1].dims, d)
		case "tensor_type":
			out[len(out)-1].dtype = unescapeC(t, val)
		case "tensor_content":
			out[len(out)-1].content = []byte(unescapeC(t, val))
		}
	}
	return out
}

// unescapeC undoes protoc's C-style escaping of a quoted string.
func unescapeC(t *testing.T, q string) string {
	t.Helper()
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		t.Fatalf("protoc value %q is not a quoted string", q)
	}
	s := q[1 : len(q)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; {
		case c >= '0' && c <= '7':
			n, err := strconv.ParseUint(s[i:i+3], 8, 8)
			if err != nil {
				t.Fatalf("octal escape in %q: %v", q, err)
			}
			b.WriteByte(byte(n))
			i += 2
		case c == 'n':
			b.WriteByte('\n')
		case c == 'r':
			b.WriteByte('\r')
		case c == 't':
			b.WriteByte('\t')
		default: // \" \' \\
			b.WriteByte(c)
		}
	}
	return b.String()
}

func TestStockProtocDecodesMspipeFile(t *testing.T) {
	protocPath(t)
	vals := make([]float32, 12)
	for i := range vals {
		vals[i] = float32(i)*0.25 - 1
	}
	w, _ := NewFloat32("fc.weight", []int64{3, 4}, vals)
	lr, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	steps := Tensor{Name: "global_step", Dims: []int64{1}, DType: DTypeInt32, Data: []byte{7, 0, 0, 0}}
	path := filepath.Join(t.TempDir(), "CKP-1_4.ckpt")
	// 48 bytes over a 20-byte limit: 3 slices of 4 elements each.
	if err := Write(path, []Tensor{w, lr, steps}, WriteOptions{SliceBytes: 20, CRC: true}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	payload := data[:len(data)-crcTrailerLen] // the trailer is not protobuf
	got := parseProtocText(t, string(runProtoc(t, payload, "--decode=Checkpoint", "proto/checkpoint.proto")))

	want := []decodedValue{
		{"fc.weight", []int64{3, 4}, "Float32", w.Data[0:16]},
		{"fc.weight", []int64{3, 4}, "Float32", w.Data[16:32]},
		{"fc.weight", []int64{3, 4}, "Float32", w.Data[32:48]},
		{"learning_rate", []int64{0}, "Float32", lr.Data},
		{"global_step", []int64{1}, "Int32", steps.Data},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("protoc decoded\n%s\nwant\n%s", fmt.Sprint(got), fmt.Sprint(want))
	}
}

func TestMspipeDecodesStockProtocFile(t *testing.T) {
	// A file built by protoc from text, the way MindSpore lays it out: a
	// scalar as dims [0], a sliced tensor repeating its full dims.
	text := `
value { tag: "conv.weight" tensor { dims: 2 dims: 2 tensor_type: "Float16" tensor_content: "\000<\000@" } }
value { tag: "conv.weight" tensor { dims: 2 dims: 2 tensor_type: "Float16" tensor_content: "\000B\000D" } }
value { tag: "momentum" tensor { dims: 0 tensor_type: "Float32" tensor_content: "fff?" } }
`
	data := runProtoc(t, []byte(text), "--encode=Checkpoint", "proto/checkpoint.proto")
	f, err := DecodeFile("protoc.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Values != 3 || len(f.Tensors) != 2 {
		t.Fatalf("%d values, %d tensors; want 3 values, 2 tensors", f.Values, len(f.Tensors))
	}
	conv, _ := f.Tensors[0].Float32s()
	if f.Tensors[0].Name != "conv.weight" || !reflect.DeepEqual(f.Tensors[0].Dims, []int64{2, 2}) || !reflect.DeepEqual(conv, []float32{1, 2, 3, 4}) {
		t.Fatalf("conv.weight = %v %v, want [2 2] [1 2 3 4]", f.Tensors[0].Dims, conv)
	}
	m, _ := f.Tensors[1].Float32s()
	if f.Tensors[1].Name != "momentum" || len(f.Tensors[1].Dims) != 0 || m[0] != 0.9 {
		t.Fatalf("momentum = %v %v, want scalar 0.9", f.Tensors[1].Dims, m)
	}
}
