package data

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/golden"
)

func smallSynth() SynthConfig { return SynthConfig{Seed: 1, TrainPerBatch: 50, TestRecords: 30} }

// TestSynthGolden pins the generator's output bytes: a change here means
// a new GeneratorVersion.
func TestSynthGolden(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSynthetic(context.Background(), dir, smallSynth()); err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	fmt.Fprintf(&sums, "# %s version %d, seed 1, 50 per train batch, 30 test\n", GeneratorName, GeneratorVersion)
	for _, name := range append(SynthFileNames(), MetaFileName) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	golden.Check(t, filepath.Join("testdata", "synth_sha256.golden"), []byte(sums.String()))
}

func TestSynthDeterminism(t *testing.T) {
	ctx := context.Background()
	cfg := smallSynth()
	one, err := SynthesizeBatch(ctx, cfg, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	many, err := SynthesizeBatch(ctx, cfg, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	if hashBytes(one) != hashBytes(many) {
		t.Error("output depends on the number of workers")
	}
	cfg.Seed = 2
	other, _ := SynthesizeBatch(ctx, cfg, 2, 0)
	if hashBytes(one) == hashBytes(other) {
		t.Error("seeds 1 and 2 give the same file")
	}
	first, _ := SynthesizeBatch(ctx, smallSynth(), 0, 0)
	if hashBytes(one) == hashBytes(first) {
		t.Error("files 0 and 2 are identical")
	}
	if len(one) != 50*RecordBytes {
		t.Errorf("file has %d bytes, want %d", len(one), 50*RecordBytes)
	}
}

func TestSynthLabelsBalanced(t *testing.T) {
	b, err := SynthesizeBatch(context.Background(), SynthConfig{Seed: 3, TrainPerBatch: 1003, TestRecords: 1}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	set, err := ParseBatch("synthetic", b)
	if err != nil {
		t.Fatal(err)
	}
	h := set.ClassHistogram()
	for c, n := range h {
		want := 100
		if c < 3 {
			want = 101
		}
		if n != want {
			t.Errorf("class %d has %d records, want %d (histogram %v)", c, n, want, h)
		}
	}
	// Shuffled, not sorted: the first ten labels are not 0..9.
	sorted := true
	for i := range 10 {
		sorted = sorted && set.Label(i) == byte(i)
	}
	if sorted {
		t.Error("labels are in class order")
	}
}

// TestSynthNeedsMoreThanOnePixel measures how well the best single pixel
// predicts the class (a per-pixel histogram classifier trained on one file,
// scored on another), and checks that whole images do carry the class: the
// mean image of each class is closer to that class's images than chance,
// yet far from enough to solve the task, which takes a network. Measured on
// generator version 1: best pixel 0.194, nearest class mean 0.248 (chance
// 0.10; 500 test images, so one standard error is about 0.015). The bounds
// sit two standard errors off the measurements.
func TestSynthNeedsMoreThanOnePixel(t *testing.T) {
	ctx := context.Background()
	cfg := SynthConfig{Seed: 9, TrainPerBatch: 1500, TestRecords: 500}
	trainBytes, err := SynthesizeBatch(ctx, cfg, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	testBytes, _ := SynthesizeBatch(ctx, cfg, 5, 0)
	train, _ := ParseBatch("train", trainBytes)
	test, _ := ParseBatch("test", testBytes)

	best, bestPos := 0.0, 0
	for pos := 0; pos < ImageBytes; pos += 3 {
		var counts [16][NumClasses]int
		for i := range train.Len() {
			counts[train.Image(i)[pos]/16][train.Label(i)]++
		}
		correct := 0
		for i := range test.Len() {
			row := counts[test.Image(i)[pos]/16]
			guess := 0
			for c := range row {
				if row[c] > row[guess] {
					guess = c
				}
			}
			if guess == int(test.Label(i)) {
				correct++
			}
		}
		if acc := float64(correct) / float64(test.Len()); acc > best {
			best, bestPos = acc, pos
		}
	}
	t.Logf("best single-pixel accuracy %.3f at byte %d", best, bestPos)
	if best > 0.22 {
		t.Errorf("one pixel predicts the class with accuracy %.3f; want at most 0.22", best)
	}

	var means [NumClasses][ImageBytes]float64
	var counts [NumClasses]int
	for i := range train.Len() {
		c := train.Label(i)
		counts[c]++
		for p, v := range train.Image(i) {
			means[c][p] += float64(v)
		}
	}
	for c := range means {
		for p := range means[c] {
			means[c][p] /= float64(counts[c])
		}
	}
	correct := 0
	for i := range test.Len() {
		guess, bestDist := 0, 0.0
		for c := range means {
			d := 0.0
			for p, v := range test.Image(i) {
				diff := float64(v) - means[c][p]
				d += diff * diff
			}
			if c == 0 || d < bestDist {
				guess, bestDist = c, d
			}
		}
		if guess == int(test.Label(i)) {
			correct++
		}
	}
	acc := float64(correct) / float64(test.Len())
	t.Logf("nearest class-mean accuracy %.3f", acc)
	if acc < 0.22 {
		t.Errorf("nearest class-mean accuracy %.3f, want at least 0.22: the images carry too little class signal", acc)
	}
	if acc > 0.35 {
		t.Errorf("nearest class-mean accuracy %.3f, want at most 0.35: a template match solves the task", acc)
	}
}

func TestSynthConfigErrors(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		cfg  SynthConfig
		file int
		want string
	}{
		{SynthConfig{TrainPerBatch: 0, TestRecords: 1}, 0, "invalid data config: synthetic train_per_batch 0 must be in [1, 100000]"},
		{SynthConfig{TrainPerBatch: 1, TestRecords: 100001}, 0, "invalid data config: synthetic test_records 100001 must be in [1, 100000]"},
		{SynthConfig{TrainPerBatch: 1, TestRecords: 1}, 6, "invalid data config: synthetic file index 6 must be in [0, 5]"},
	}
	for _, tc := range cases {
		_, err := SynthesizeBatch(ctx, tc.cfg, tc.file, 1)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v file %d: error %v, want %q", tc.cfg, tc.file, err, tc.want)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := SynthesizeBatch(cancelled, smallSynth(), 0, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestSynthReadsAsCIFAR(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSynthetic(context.Background(), dir, smallSynth()); err != nil {
		t.Fatal(err)
	}
	all, err := ReadDir(dir, SplitAll)
	if err != nil {
		t.Fatal(err)
	}
	if all.Len() != 5*50+30 {
		t.Errorf("read %d records, want 280", all.Len())
	}
	meta, _ := os.ReadFile(filepath.Join(dir, MetaFileName))
	if lines := strings.Fields(string(meta)); len(lines) != NumClasses || lines[0] != "airplane" || lines[9] != "truck" {
		t.Errorf("batches.meta.txt = %q", meta)
	}
}

// TestSynthTrainSplitsExactly: SynthTrain writes exactly n training
// images, n/5 in each data_batch file and one more in the first n%5, so
// prepare's train_images is what the data set holds.
func TestSynthTrainSplitsExactly(t *testing.T) {
	for _, n := range []int{5, 7, 12, 54} {
		dir := t.TempDir()
		if err := WriteSynthetic(context.Background(), dir, smallSynth().SynthTrain(n)); err != nil {
			t.Fatalf("%d images: %v", n, err)
		}
		for i, name := range TrainFileNames() {
			st, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			want := n / NumTrainFiles
			if i < n%NumTrainFiles {
				want++
			}
			if got := int(st.Size()) / RecordBytes; got != want || st.Size()%RecordBytes != 0 {
				t.Errorf("%d images: %s holds %d bytes, want %d records", n, name, st.Size(), want)
			}
		}
		train, err := ReadDir(dir, SplitTrain)
		if err != nil {
			t.Fatal(err)
		}
		if train.Len() != n {
			t.Errorf("%d images: the train split reads %d", n, train.Len())
		}
	}
}
