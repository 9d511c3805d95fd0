package trainer

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/npu/data"
)

// Evaluate scores the held-out split, not the training data: with a test
// file of 20 identical images all labelled L, any model predicts one class
// for all of them, so exactly one of the ten labels scores 1 and the
// others 0. Scoring the (varied) training split would give every L the
// same accuracy.
func TestEvaluateReadsTheTestSplit(t *testing.T) {
	dataDir := tinyData(t, 8)
	m, err := NewModel("cnn", 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	img := make([]byte, data.ImageBytes)
	for i := range img {
		img[i] = byte(i * 7)
	}
	hits := 0.0
	for label := 0; label < 10; label++ {
		raw := make([]byte, 0, 20*data.RecordBytes)
		rec := make([]byte, data.RecordBytes)
		for range 20 {
			data.EncodeRecord(rec, uint8(label), img)
			raw = append(raw, rec...)
		}
		if err := os.WriteFile(filepath.Join(dataDir, data.TestFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		acc, _, err := Evaluate(context.Background(), m, dataDir, 8)
		if err != nil {
			t.Fatal(err)
		}
		if acc != 0 && acc != 1 {
			t.Fatalf("label %d: accuracy %v on 20 identical images, want 0 or 1", label, acc)
		}
		hits += acc
	}
	if hits != 1 {
		t.Errorf("%v labels scored 1, want exactly one", hits)
	}
}
