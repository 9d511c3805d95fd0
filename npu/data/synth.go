package data

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/mspipe/mspipe/internal/atomicfile"
)

// The synthetic data set stands in for CIFAR-10, which cannot be downloaded
// here. It is written in exactly the CIFAR-10 binary format, so every reader
// of the real data reads it unchanged.
//
// # Design (generator version 1)
//
// Each class c has a template: a shape, a colour, and a background grating
// (stripes along x or y at a class frequency). Every image is drawn from its
// own seed, deriveSeed(seed, file, record), so a file's bytes depend only on
// the configuration, never on goroutine scheduling:
//
//   - background: a random colour plus the grating of class c with
//     probability 0.7 (else of a random class), random amplitude and phase;
//   - the class shape at a random centre (±5.5 px from the middle, so
//     positions vary more than RandomCrop's ±4), random radius 6.5–10.5 px,
//     random opacity 0.55–1, anti-aliased by 2×2 supersampling;
//   - its colour is the class colour (jittered) with probability 0.5, else a
//     random colour, kept at least 60 luma levels away from the background;
//   - with probability 0.25 a small distractor shape of another class;
//   - Gaussian-like pixel noise, σ = 12 levels per channel.
//
// All shapes and gratings are symmetric under a left–right flip, so
// RandomHorizontalFlip does not change the class evidence. Colour and any
// single pixel carry little information about the class: the shape, its
// size relative to distractors, and the grating have to be seen over a
// region, which is what a small ResNet learns; held-out accuracy far above
// the 10% of chance shows that training works. Labels are balanced within
// every file (counts differ by at most one) and shuffled by the seed.
//
// Images are computed in float64 and rounded once to bytes. The golden
// SHA-256 test pins the bytes on amd64; on architectures where the Go
// compiler fuses multiply-adds (arm64, ppc64, s390x) a value that lands
// within one rounding step of a .5 boundary could round differently, which
// is possible in principle but not expected in any file of practical size.
// The manifest's hashes, not the seed, are the identity of a data set.
//
// Changing anything here that changes output bytes must bump
// GeneratorVersion: manifests record it with the seed.

// GeneratorName and GeneratorVersion identify the synthetic generator in
// manifests.
const (
	GeneratorName    = "mspipe-synthetic-cifar10"
	GeneratorVersion = 1
)

// SynthConfig sizes and seeds a synthetic data set. It always has the five
// train batch files and the test batch file of the real layout.
type SynthConfig struct {
	Seed          uint64 `json:"seed"`
	TrainPerBatch int    `json:"train_per_batch"` // records in each data_batch_i.bin
	// TrainExtra data_batch files, the first ones, hold one record more
	// than TrainPerBatch, so that any total can be written exactly.
	TrainExtra  int `json:"train_extra,omitempty"`
	TestRecords int `json:"test_records"` // records in test_batch.bin
}

// SynthTrain returns the config's split of n training images over the
// data_batch files: n/5 each, the first n%5 files one more.
func (c SynthConfig) SynthTrain(n int) SynthConfig {
	c.TrainPerBatch, c.TrainExtra = n/NumTrainFiles, n%NumTrainFiles
	return c
}

// DefaultSynthConfig is 5×2,000 train and 2,000 test images: large enough to
// learn, small enough to train on a CPU in minutes.
func DefaultSynthConfig() SynthConfig {
	return SynthConfig{Seed: 1, TrainPerBatch: 2000, TestRecords: 2000}
}

// MaxSynthRecords bounds one synthetic file (the real files hold 10,000).
const MaxSynthRecords = 100_000

func (c SynthConfig) validate() error {
	if c.TrainPerBatch < 1 || c.TrainPerBatch > MaxSynthRecords {
		return fmt.Errorf("%w: synthetic train_per_batch %d must be in [1, %d]", ErrConfig, c.TrainPerBatch, MaxSynthRecords)
	}
	if c.TrainExtra < 0 || c.TrainExtra >= NumTrainFiles || (c.TrainExtra > 0 && c.TrainPerBatch+1 > MaxSynthRecords) {
		return fmt.Errorf("%w: synthetic train_extra %d must be in [0, %d) and keep every file within %d records", ErrConfig, c.TrainExtra, NumTrainFiles, MaxSynthRecords)
	}
	if c.TestRecords < 1 || c.TestRecords > MaxSynthRecords {
		return fmt.Errorf("%w: synthetic test_records %d must be in [1, %d]", ErrConfig, c.TestRecords, MaxSynthRecords)
	}
	return nil
}

// SynthFileNames lists the synthetic files in generation order: the five
// train batches, then the test batch. Index i of this list is file i.
func SynthFileNames() []string { return append(TrainFileNames(), TestFile) }

func (c SynthConfig) records(file int) int {
	if file < NumTrainFiles {
		if file < c.TrainExtra {
			return c.TrainPerBatch + 1
		}
		return c.TrainPerBatch
	}
	return c.TestRecords
}

// SynthesizeBatch returns the bytes of synthetic file number file (0..4 for
// data_batch_1..5, 5 for test_batch), generating records on up to workers
// goroutines (0 means GOMAXPROCS). The result does not depend on workers.
func SynthesizeBatch(ctx context.Context, cfg SynthConfig, file, workers int) ([]byte, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if file < 0 || file > NumTrainFiles {
		return nil, fmt.Errorf("%w: synthetic file index %d must be in [0, %d]", ErrConfig, file, NumTrainFiles)
	}
	n := cfg.records(file)
	labels := balancedLabels(n, deriveSeed(cfg.Seed, tagSynthLabels, uint64(file), 0))
	out := make([]byte, n*RecordBytes)
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var canvas synthCanvas
			for j := lo; j < hi; j++ {
				if j%256 == 0 && ctx.Err() != nil {
					return
				}
				rec := out[j*RecordBytes : (j+1)*RecordBytes]
				rec[0] = labels[j]
				canvas.render(rec[1:], int(labels[j]), deriveSeed(cfg.Seed, tagSynthRecord, uint64(file), uint64(j)))
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// WriteSynthetic writes the six synthetic batch files and batches.meta.txt
// into dir (created if needed), each atomically.
func WriteSynthetic(ctx context.Context, dir string, cfg SynthConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := mkdirAll(dir); err != nil {
		return err
	}
	for i, name := range SynthFileNames() {
		b, err := SynthesizeBatch(ctx, cfg, i, 0)
		if err != nil {
			return fmt.Errorf("synthesize %s: %w", name, err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return writeMeta(dir)
}

func writeMeta(dir string) error {
	names := ClassNames()
	meta := strings.Join(names[:], "\n") + "\n"
	return atomicfile.WriteFile(filepath.Join(dir, MetaFileName), []byte(meta), 0o644)
}

// balancedLabels returns n labels with every class count within one of the
// others, in a seeded random order.
func balancedLabels(n int, seed uint64) []byte {
	labels := make([]byte, n)
	for i := range labels {
		labels[i] = byte(i % NumClasses)
	}
	r := newRNG(seed)
	for i := n - 1; i > 0; i-- {
		j := r.intn(i + 1)
		labels[i], labels[j] = labels[j], labels[i]
	}
	return labels
}

// Shapes of the class templates; each is symmetric under a left–right flip.
const (
	shapeDisc = iota
	shapeSquare
	shapeRing
	shapePlus
	shapeTriangle
	shapeDiamond
	shapeHBars
	shapeVBars
	shapeCross
	shapeTee
)

type classTemplate struct {
	shape    int
	colour   [Channels]float64
	vertical bool    // stripes vary along x (else along y)
	cycles   float64 // stripe periods across the 32-pixel image
}

// templates are the version-1 class templates; index = label.
func template(class int) classTemplate {
	colours := [NumClasses][Channels]float64{
		{220, 60, 50}, {240, 150, 40}, {230, 220, 60}, {70, 190, 70}, {50, 180, 170},
		{60, 90, 220}, {150, 70, 200}, {230, 110, 180}, {140, 90, 50}, {205, 205, 215},
	}
	return classTemplate{
		shape:    class,
		colour:   colours[class],
		vertical: class%2 == 1,
		cycles:   float64(2 + class/2),
	}
}

// inShape reports whether the point (u, v), in units of the shape's radius
// relative to its centre (v grows downwards), lies inside shape.
func inShape(shape int, u, v float64) bool {
	au, av := math.Abs(u), math.Abs(v)
	switch shape {
	case shapeDisc:
		return u*u+v*v <= 1
	case shapeSquare:
		return au <= 0.8 && av <= 0.8
	case shapeRing:
		d := u*u + v*v
		return d <= 1 && d >= 0.3
	case shapePlus:
		return (au <= 0.3 && av <= 1) || (av <= 0.3 && au <= 1)
	case shapeTriangle:
		return v >= -1 && v <= 0.8 && au <= (v+1)*0.6
	case shapeDiamond:
		return au+av <= 1
	case shapeHBars:
		return au <= 1 && math.Abs(av-0.5) <= 0.22
	case shapeVBars:
		return av <= 1 && math.Abs(au-0.5) <= 0.22
	case shapeCross:
		return au <= 0.9 && av <= 0.9 && math.Abs(au-av) <= 0.3
	case shapeTee:
		return (v >= -1 && v <= -0.5 && au <= 1) || (au <= 0.25 && av <= 1)
	}
	return false
}

// synthCanvas is the float working image of one render (planar).
type synthCanvas [Channels][PlaneBytes]float64

func luma(c [Channels]float64) float64 { return 0.299*c[0] + 0.587*c[1] + 0.114*c[2] }

func randomColour(r *rng, lo, hi float64) [Channels]float64 {
	return [Channels]float64{r.uniform(lo, hi), r.uniform(lo, hi), r.uniform(lo, hi)}
}

// render draws one image of class into dst (ImageBytes, planar RGB). The
// order of random draws is part of the format of version 1.
func (cv *synthCanvas) render(dst []byte, class int, seed uint64) {
	r := newRNG(seed)
	tpl := template(class)

	// Foreground colour, then a background far enough from it in luma.
	var fg [Channels]float64
	if r.float() < 0.5 {
		for ch := range fg {
			fg[ch] = clamp255(tpl.colour[ch] + r.uniform(-30, 30))
		}
	} else {
		fg = randomColour(&r, 0, 255)
	}
	bg := randomColour(&r, 30, 225)
	for try := 0; try < 16 && math.Abs(luma(bg)-luma(fg)) < 60; try++ {
		bg = randomColour(&r, 30, 225)
	}

	grating := tpl
	if r.float() >= 0.7 {
		grating = template(r.intn(NumClasses))
	}
	amp := r.uniform(10, 35)
	phase := r.uniform(0, 2*math.Pi)
	for y := range ImageSize {
		for x := range ImageSize {
			t := float64(y)
			if grating.vertical {
				t = float64(x)
			}
			g := amp * math.Sin(2*math.Pi*grating.cycles*t/ImageSize+phase)
			for ch := range Channels {
				cv[ch][y*ImageSize+x] = bg[ch] + g
			}
		}
	}

	if r.float() < 0.35 {
		other := (class + 1 + r.intn(NumClasses-1)) % NumClasses
		colour := randomColour(&r, 0, 255)
		radius := r.uniform(3, 5)
		cx, cy := r.uniform(4, 27), r.uniform(4, 27)
		cv.drawShape(other, cx, cy, radius, 0.8, colour)
	}

	radius := r.uniform(5.5, 10.5)
	cx := 15.5 + r.uniform(-5.5, 5.5)
	cy := 15.5 + r.uniform(-5.5, 5.5)
	opacity := r.uniform(0.4, 1)
	cv.drawShape(tpl.shape, cx, cy, radius, opacity, fg)

	if r.float() < 0.2 {
		cv.occlude(r.intn(ImageSize), r.intn(ImageSize), 6+r.intn(9), 6+r.intn(9), randomColour(&r, 0, 255))
	}

	const sigma = 18
	for ch := range Channels {
		out := dst[ch*PlaneBytes : (ch+1)*PlaneBytes]
		for i := range out {
			// Sum of three uniforms: mean 1.5, standard deviation 0.5.
			noise := (r.float() + r.float() + r.float() - 1.5) * 2 * sigma
			out[i] = uint8(math.Floor(clamp255(cv[ch][i]+noise) + 0.5))
		}
	}
}

// drawShape blends colour over the canvas with the shape's 2×2-supersampled
// coverage times opacity.
func (cv *synthCanvas) drawShape(shape int, cx, cy, radius, opacity float64, colour [Channels]float64) {
	x0, x1 := max(0, int(cx-radius)-1), min(ImageSize-1, int(cx+radius)+1)
	y0, y1 := max(0, int(cy-radius)-1), min(ImageSize-1, int(cy+radius)+1)
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			hits := 0
			for _, oy := range [2]float64{-0.25, 0.25} {
				for _, ox := range [2]float64{-0.25, 0.25} {
					if inShape(shape, (float64(x)+ox-cx)/radius, (float64(y)+oy-cy)/radius) {
						hits++
					}
				}
			}
			if hits == 0 {
				continue
			}
			a := opacity * float64(hits) / 4
			i := y*ImageSize + x
			for ch := range Channels {
				cv[ch][i] += a * (colour[ch] - cv[ch][i])
			}
		}
	}
}

// occlude paints an opaque w×h rectangle with its top-left corner at (x, y),
// clipped to the image.
func (cv *synthCanvas) occlude(x, y, w, h int, colour [Channels]float64) {
	for yy := y; yy < min(y+h, ImageSize); yy++ {
		for xx := x; xx < min(x+w, ImageSize); xx++ {
			for ch := range Channels {
				cv[ch][yy*ImageSize+xx] = colour[ch]
			}
		}
	}
}

func clamp255(v float64) float64 { return min(255, max(0, v)) }
