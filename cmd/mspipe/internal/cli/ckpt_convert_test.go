package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
)

func TestCkptConvertRoundTrip(t *testing.T) {
	path, tensors := inspectFixture(t)
	dir := t.TempDir()
	st := filepath.Join(dir, "model.safetensors")
	back := filepath.Join(dir, "back.ckpt")

	code, stdout, stderr := runCkpt(t, "convert", path, st)
	if code != ExitOK || stdout != st+": 7 tensors, 84 data bytes (safetensors)\n" {
		t.Fatalf("to safetensors: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	f, err := ckpt.ReadSafetensors(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Compare(tensors, f.Tensors); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCkpt(t, "convert", st, back); code != ExitOK {
		t.Fatalf("back to ckpt: exit %d: %s", code, stderr)
	}
	got, err := ckpt.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Compare(tensors, got.Tensors); err != nil || got.CRC {
		t.Fatalf("round trip: %v, crc %v (want none by default, as MindSpore saves)", err, got.CRC)
	}
	if vals := ckpttest.DecodeFile(t, back); len(vals) != got.Values {
		t.Fatalf("protoc decoded %d values, ckpt %d", len(vals), got.Values)
	}
	for i := range tensors {
		if got.Tensors[i].Name != tensors[i].Name {
			t.Fatalf("order changed: %d is %s, want %s", i, got.Tensors[i].Name, tensors[i].Name)
		}
	}
	// inspect reads safetensors by its name and shows the same hashes.
	_, a, _ := runCkpt(t, "inspect", path)
	_, b, _ := runCkpt(t, "inspect", st)
	tail := func(s string) string { return s[strings.Index(s, "NAME"):] }
	if tail(a) != tail(b) {
		t.Fatalf("inspect differs:\n%s\n%s", a, b)
	}
	withCRC := filepath.Join(dir, "crc.ckpt")
	if code, _, _ := runCkpt(t, "convert", "--crc", st, withCRC); code != ExitOK {
		t.Fatal("--crc failed")
	}
	if f, _ := ckpt.ReadFile(withCRC); f == nil || !f.CRC {
		t.Fatalf("--crc wrote no trailer")
	}
}

func TestCkptConvertErrors(t *testing.T) {
	path, _ := inspectFixture(t)
	dir := t.TempDir()
	if code, _, stderr := runCkpt(t, "convert", path, filepath.Join(dir, "x.npz")); code != ExitUsage || !strings.Contains(stderr, "name the output .ckpt or .safetensors") {
		t.Fatalf("unknown extension: exit %d %q", code, stderr)
	}
	if code, _, stderr := runCkpt(t, "convert", path, path); code != ExitUsage || !strings.Contains(stderr, "would replace the input") {
		t.Fatalf("same file: exit %d %q", code, stderr)
	}
	bad := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(bad, []byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}'}, 0o644)
	out := filepath.Join(dir, "out.ckpt")
	code, _, stderr := runCkpt(t, "convert", bad, out)
	if code != ExitFailed || !strings.Contains(stderr, bad+": ") {
		t.Fatalf("bad input: exit %d %q", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a failed conversion left %s", out)
	}
	// An 8-bit float dtype with no MindSpore name is refused naming the tensor.
	f8 := filepath.Join(dir, "f8.safetensors")
	hdr := `{"w":{"dtype":"F8_E5M2","shape":[8],"data_offsets":[0,8]}}`
	raw := append([]byte{byte(len(hdr)), 0, 0, 0, 0, 0, 0, 0}, hdr...)
	os.WriteFile(f8, append(raw, make([]byte, 8)...), 0o644)
	if code, _, stderr := runCkpt(t, "convert", f8, out); code != ExitFailed || !strings.Contains(stderr, `tensor "w"`) || !strings.Contains(stderr, "F8_E5M2") {
		t.Fatalf("f8: exit %d %q", code, stderr)
	}
}
