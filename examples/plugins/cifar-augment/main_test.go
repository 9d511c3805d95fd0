package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/plugins"
)

// The example plugin doubles the training set with mirrored, brightened
// copies and leaves the held-out set alone.
func TestAugmentDoublesTheTrainingSet(t *testing.T) {
	src := t.TempDir()
	if err := data.WriteSynthetic(context.Background(), src, data.SynthConfig{Seed: 5, TrainPerBatch: 6, TestRecords: 4}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	req := plugins.RunRequest{StageID: "augment", WorkDir: work, Attempt: 1,
		With: map[string]any{"data": src, "brightness": int64(200)}}
	out, err := stage().Run(context.Background(), req, func(plugins.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	if out["train_count"] != 60 && out["train_count"] != int64(60) {
		t.Errorf("train_count = %v, want 60 (5 batches of 6, doubled)", out["train_count"])
	}
	dir, _ := out["dir"].(string)
	orig, err := data.ReadFile(filepath.Join(src, data.TrainFileNames()[0]))
	if err != nil {
		t.Fatal(err)
	}
	aug, err := data.ReadFile(filepath.Join(dir, data.TrainFileNames()[0]))
	if err != nil {
		t.Fatal(err)
	}
	if aug.Len() != 12 || !bytes.Equal(aug.Bytes()[:6*data.RecordBytes], orig.Bytes()) {
		t.Fatalf("augmented batch: %d records, first half equal to the original: %v", aug.Len(), bytes.Equal(aug.Bytes()[:6*data.RecordBytes], orig.Bytes()))
	}
	// Record 6 is record 0 mirrored left-right, each pixel +200 clamped to 255.
	src0, img := orig.Image(0), aug.Image(6)
	if aug.Label(6) != orig.Label(0) {
		t.Errorf("label %d, want %d", aug.Label(6), orig.Label(0))
	}
	for plane := 0; plane < 3; plane++ {
		for y := 0; y < 32; y++ {
			for x := 0; x < 32; x++ {
				want := min(int(src0[plane*1024+y*32+31-x])+200, 255)
				if got := int(img[plane*1024+y*32+x]); got != want {
					t.Fatalf("plane %d (%d,%d): %d, want %d", plane, x, y, got, want)
				}
			}
		}
	}
	testOrig, _ := data.ReadFile(filepath.Join(src, data.TestFile))
	testAug, err := data.ReadFile(filepath.Join(dir, data.TestFile))
	if err != nil || !bytes.Equal(testOrig.Bytes(), testAug.Bytes()) {
		t.Errorf("the held-out set must be copied unchanged (%v)", err)
	}
}
