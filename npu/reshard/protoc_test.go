package reshard

import (
	"context"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
)

// TestDefaultOutputIsPlainProtobuf: with default options every file a
// reshard or merge writes is one protobuf Checkpoint (MindSpore's
// crc_check=False default), which stock protoc decodes against
// checkpoint.proto into the tensors ckpt reads; Options.CRC adds the
// trailer and the set still verifies.
func TestDefaultOutputIsPlainProtobuf(t *testing.T) {
	ckpttest.ProtocPath(t)
	ctx := context.Background()
	src, _ := seedSet(t) // sources with the trailer: both kinds read
	for _, crc := range []bool{false, true} {
		out, merged := t.TempDir(), t.TempDir()
		m, err := Run(ctx, src, TargetForDevices(src, 2), out, Options{CRC: crc})
		if err != nil {
			t.Fatal(err)
		}
		mm, err := Merge(ctx, src, merged, "merged.ckpt", Options{CRC: crc})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range append(setFiles(out, m), setFiles(merged, mm)...) {
			f, err := ckpt.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if f.CRC != crc {
				t.Fatalf("%s: crc_num trailer %v, want %v", p, f.CRC, crc)
			}
			if crc {
				continue // protoc cannot read past the trailer: that is the point
			}
			vals := ckpttest.DecodeFile(t, p)
			if len(vals) != f.Values || vals[0].Tag != f.Tensors[0].Name || string(vals[0].Content) != string(f.Tensors[0].Data) {
				t.Fatalf("%s: protoc decoded %d values (first %q), ckpt %d (first %q)", p, len(vals), vals[0].Tag, f.Values, f.Tensors[0].Name)
			}
		}
		if _, err := Verify(ctx, out, Options{}); err != nil {
			t.Fatalf("crc %v: %v", crc, err)
		}
	}
}
