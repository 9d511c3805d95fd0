package data

import (
	"math"
	"slices"
	"testing"
)

func TestCropFlip(t *testing.T) {
	// Two 3×3 channels: 1..9 and 10..90, padding 1.
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90}
	cases := []struct {
		name      string
		top, left int
		flip      bool
		want      []byte
	}{
		{"top-left corner", 0, 0, false, []byte{0, 0, 0, 0, 1, 2, 0, 4, 5, 0, 0, 0, 0, 10, 20, 0, 40, 50}},
		{"centre is identity", 1, 1, false, src},
		{"bottom, centred", 2, 1, false, []byte{4, 5, 6, 7, 8, 9, 0, 0, 0, 40, 50, 60, 70, 80, 90, 0, 0, 0}},
		{"centre flipped", 1, 1, true, []byte{3, 2, 1, 6, 5, 4, 9, 8, 7, 30, 20, 10, 60, 50, 40, 90, 80, 70}},
		{"top-right then flipped", 0, 2, true, []byte{0, 0, 0, 0, 3, 2, 0, 6, 5, 0, 0, 0, 0, 30, 20, 0, 60, 50}},
		{"bottom-right", 2, 2, false, []byte{5, 6, 0, 8, 9, 0, 0, 0, 0, 50, 60, 0, 80, 90, 0, 0, 0, 0}},
	}
	for _, tc := range cases {
		dst := make([]byte, len(src))
		CropFlip(dst, src, 2, 3, 3, 1, tc.top, tc.left, tc.flip)
		if !slices.Equal(dst, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, dst, tc.want)
		}
	}
	// No padding, no flip: a copy.
	dst := make([]byte, len(src))
	CropFlip(dst, src, 2, 3, 3, 0, 0, 0, false)
	if !slices.Equal(dst, src) {
		t.Errorf("padding 0: got %v, want the source", dst)
	}
}

func TestResizeBilinear(t *testing.T) {
	src := []byte{0, 100, 200, 50}
	dst := make([]byte, 16)
	NewResizer(1, 2, 2, 4, 4).Resize(dst, src)
	// Half-pixel centres: rows/columns sample source coordinates
	// -0.25→0, 0.25, 0.75, 1.25→1; values round half up.
	want := []byte{
		0, 25, 75, 100,
		50, 59, 78, 88,
		150, 128, 84, 63,
		200, 163, 88, 50,
	}
	if !slices.Equal(dst, want) {
		t.Errorf("2x2→4x4: got %v, want %v", dst, want)
	}

	// Downscale 4→2 averages the centre pairs: coordinates 0.5 and 2.5.
	src4 := []byte{
		10, 20, 30, 40,
		50, 60, 70, 80,
		90, 100, 110, 120,
		130, 140, 150, 160,
	}
	dst2 := make([]byte, 4)
	NewResizer(1, 4, 4, 2, 2).Resize(dst2, src4)
	if want := []byte{35, 55, 115, 135}; !slices.Equal(dst2, want) {
		t.Errorf("4x4→2x2: got %v, want %v", dst2, want)
	}

	same := make([]byte, 16)
	NewResizer(1, 4, 4, 4, 4).Resize(same, src4)
	if !slices.Equal(same, src4) {
		t.Errorf("4x4→4x4: got %v, want the source", same)
	}
}

func TestNormTable(t *testing.T) {
	// Constants chosen so every result is exact in float32.
	tab := NewNormTable(1, -128, [Channels]float32{0, 0, 1}, [Channels]float32{128, 64, 0.5})
	cases := []struct {
		ch   int
		v    byte
		want float32
	}{
		{0, 0, -1}, {0, 64, -0.5}, {0, 128, 0}, {0, 255, 0.9921875},
		{1, 0, -2}, {1, 192, 1},
		{2, 129, 0}, {2, 130, 2},
	}
	for _, tc := range cases {
		if got := tab[tc.ch][tc.v]; got != tc.want {
			t.Errorf("channel %d value %d: got %v, want %v", tc.ch, tc.v, got, tc.want)
		}
	}

	// The seeds' constants: ((v/255) - mean)/std.
	cfg := SeedConfig(1, 0, 0)
	seeds := NewNormTable(cfg.Rescale, cfg.Shift, cfg.Mean, cfg.Std)
	for _, v := range []int{0, 1, 114, 255} {
		for c := range Channels {
			want := (float64(v)/255 - float64(cfg.Mean[c])) / float64(cfg.Std[c])
			if got := float64(seeds[c][v]); math.Abs(got-want) > 1e-5 {
				t.Errorf("seeds channel %d value %d: got %v, want %v", c, v, got, want)
			}
		}
	}
	if got := seeds[0][0]; math.Abs(float64(got)+2.2213930) > 1e-6 {
		t.Errorf("seeds R at 0 = %v, want -0.4465/0.2010 = -2.2213930", got)
	}

	dst := make([]float32, 6)
	tab.Apply(dst, []byte{0, 64, 0, 192, 129, 130}, 2)
	if want := []float32{-1, -0.5, -2, 1, 0, 2}; !slices.Equal(dst, want) {
		t.Errorf("Apply: got %v, want %v", dst, want)
	}
}
