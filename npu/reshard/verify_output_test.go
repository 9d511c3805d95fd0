package reshard

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// withWrittenHook installs fn as the hook Run calls once its files are
// written, for the test's duration.
func withWrittenHook(t *testing.T, fn func(paths []string)) {
	t.Helper()
	testHookWritten = fn
	t.Cleanup(func() { testHookWritten = nil })
}

// TestRunCatchesCorruptedOutput: a byte changed in an output file after
// Run wrote and synced it, before its check, fails the run under either
// check, and the run leaves neither files nor a manifest behind.
func TestRunCatchesCorruptedOutput(t *testing.T) {
	ctx := context.Background()
	src, _ := seedSet(t)
	for _, check := range []string{VerifyOutputCRC, VerifyOutputSHA256} {
		t.Run(check, func(t *testing.T) {
			var hooked string
			withWrittenHook(t, func(paths []string) {
				hooked = paths[1]
				data, err := os.ReadFile(hooked)
				if err != nil {
					t.Fatal(err)
				}
				data[len(data)/2] ^= 0x10 // inside tensor data, far from the trailer
				if err := os.WriteFile(hooked, data, 0o644); err != nil {
					t.Fatal(err)
				}
			})
			out := t.TempDir()
			_, err := Run(ctx, src, TargetForDevices(src, 2), out, Options{VerifyOutput: check})
			if !errors.Is(err, ckpt.ErrCRC) || !strings.Contains(err.Error(), "rank_1.ckpt") || !strings.Contains(err.Error(), "check what was written") {
				t.Fatalf("err = %v, want a crc error naming rank_1.ckpt from the check", err)
			}
			if hooked != filepath.Join(out, "rank_1.ckpt") {
				t.Fatalf("hook saw %q", hooked)
			}
			if left := listDir(t, out); len(left) != 0 {
				t.Fatalf("a failed run left %v", left)
			}
		})
	}
}

// TestRunCatchesTruncatedOutput: a file cut short after writing fails the
// size check before any CRC is computed.
func TestRunCatchesTruncatedOutput(t *testing.T) {
	src, _ := seedSet(t)
	withWrittenHook(t, func(paths []string) {
		info, err := os.Stat(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(paths[0], info.Size()-1); err != nil {
			t.Fatal(err)
		}
	})
	out := t.TempDir()
	_, err := Run(context.Background(), src, TargetForDevices(src, 2), out, Options{})
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "rank_0.ckpt") || !strings.Contains(err.Error(), "the manifest says") {
		t.Fatalf("err = %v, want a size mismatch naming rank_0.ckpt", err)
	}
	if left := listDir(t, out); len(left) != 0 {
		t.Fatalf("a failed run left %v", left)
	}
}

// TestManifestHashesAcrossBands: with bands of a few rows, each tensor's
// hash is computed from many bands as they stream; it must equal
// ckpt.Tensor.Hash of the whole tensor, under both output checks, and
// Verify (the full SHA-256 re-read) must accept the set.
func TestManifestHashesAcrossBands(t *testing.T) {
	old := maxBandBytes
	maxBandBytes = 3 << 10 // a handful of rows per band
	t.Cleanup(func() { maxBandBytes = old })

	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	v := make([]float32, 96*64)
	for i := range v {
		v[i] = rng.Float32()
	}
	model := []ckpt.Tensor{
		mustFloat32(t, "fc.weight", []int64{96, 64}, v),
		mustFloat32(t, "moments.fc.weight", []int64{96, 64}, v[:96*64]),
		mustFloat32(t, "learning_rate", nil, []float32{0.5}),
	}
	// Columns split four ways: every band gathers four narrow pieces.
	src := writeSourceSet(t, t.TempDir(), model, map[string]Placement{
		"fc.weight": {Shape: []int{96, 64}, Boxes: layoutBoxes(t, parallel.Layout{DeviceMatrix: []int{4}, TensorMap: []int{-1, 0}, Shape: []int{96, 64}})},
	}, 4, ckpt.WriteOptions{CRC: true})
	target := TargetForDevices(src, 2) // 32 columns each
	plan, err := Plan(ctx, src, target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Tensors[0].Bands < 8 {
		t.Fatalf("%d bands, want many", plan.Tensors[0].Bands)
	}
	for _, check := range []string{VerifyOutputCRC, VerifyOutputSHA256} {
		out := t.TempDir()
		m, err := Run(ctx, src, target, out, Options{VerifyOutput: check})
		if err != nil {
			t.Fatalf("%s: %v", check, err)
		}
		checkSet(t, out, m, model, target)
		if _, err := Verify(ctx, out, Options{}); err != nil {
			t.Fatalf("%s: verify: %v", check, err)
		}
	}
}

func TestVerifyOutputOption(t *testing.T) {
	src, _ := seedSet(t)
	_, err := Run(context.Background(), src, TargetForDevices(src, 2), t.TempDir(), Options{VerifyOutput: "md5"})
	if err == nil || !strings.Contains(err.Error(), `output check "md5"`) {
		t.Fatalf("err = %v, want the unknown output check refused", err)
	}
}
