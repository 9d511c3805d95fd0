package data

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// patternSet returns n records; record i has label i%10 and pixel
// (c, y, x) = (i*7 + c*50 + y*5 + x) mod 256, so every record, channel and
// position is distinguishable.
func patternSet(t testing.TB, n int) *Set {
	t.Helper()
	raw := make([]byte, n*RecordBytes)
	for i := range n {
		rec := raw[i*RecordBytes:]
		rec[0] = byte(i % NumClasses)
		for c := range Channels {
			for y := range ImageSize {
				for x := range ImageSize {
					rec[1+c*PlaneBytes+y*ImageSize+x] = byte(i*7 + c*50 + y*5 + x)
				}
			}
		}
	}
	set, err := ParseBatch("pattern.bin", raw)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// plainConfig is an exact-arithmetic pipeline without randomness:
// output = (v - 128)/128.
func plainConfig(batch int) Config {
	return Config{
		BatchSize: batch, DropRemainder: true, NumShards: 1,
		Rescale: 1, Shift: -128, Std: [Channels]float32{128, 128, 128},
	}
}

func TestPipelineExactPixels(t *testing.T) {
	set := patternSet(t, 5)
	p, err := NewPipeline(set, plainConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	if p.StepsPerEpoch() != 2 || p.SamplesPerEpoch() != 5 {
		t.Fatalf("steps %d samples %d, want 2 steps (drop_remainder) of 5 samples", p.StepsPerEpoch(), p.SamplesPerEpoch())
	}
	b := p.NewBatch()
	if err := p.NewLoader().Fill(b, 0, 1); err != nil {
		t.Fatal(err)
	}
	if b.N != 2 || b.C != 3 || b.H != 32 || b.W != 32 || len(b.Images) != 2*3072 || b.Epoch != 0 || b.Step != 1 {
		t.Fatalf("batch shape N=%d C=%d H=%d W=%d len=%d", b.N, b.C, b.H, b.W, len(b.Images))
	}
	if !slices.Equal(b.Labels, []int32{2, 3}) {
		t.Errorf("labels %v, want [2 3]", b.Labels)
	}
	cases := []struct {
		n, c, y, x int
		want       float32
	}{
		// Record 2: (14 + c*50 + 5y + x - 128)/128.
		{0, 0, 0, 0, (14 - 128) / 128.0},
		{0, 1, 0, 0, (64 - 128) / 128.0},
		{0, 2, 3, 4, (14 + 100 + 15 + 4 - 128) / 128.0},
		// Record 3, pixel (31, 31): 21 + 155 + 31 = 207, R plane.
		{1, 0, 31, 31, (207 - 128) / 128.0},
		// Record 3, B plane (31, 31): 21+100+155+31 = 307 mod 256 = 51.
		{1, 2, 31, 31, (51 - 128) / 128.0},
	}
	for _, tc := range cases {
		got := b.Images[((tc.n*3+tc.c)*32+tc.y)*32+tc.x]
		if got != tc.want {
			t.Errorf("image %d channel %d (%d,%d) = %v, want %v", tc.n, tc.c, tc.y, tc.x, got, tc.want)
		}
	}
}

func TestPipelineKeepsShortLastBatch(t *testing.T) {
	cfg := plainConfig(2)
	cfg.DropRemainder = false
	p, err := NewPipeline(patternSet(t, 5), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.StepsPerEpoch() != 3 {
		t.Fatalf("steps %d, want 3", p.StepsPerEpoch())
	}
	b := p.NewBatch()
	if err := p.NewLoader().Fill(b, 0, 2); err != nil {
		t.Fatal(err)
	}
	if b.N != 1 || len(b.Images) != 3072 || !slices.Equal(b.Labels, []int32{4}) {
		t.Errorf("last batch N=%d len=%d labels=%v, want one image labelled 4", b.N, len(b.Images), b.Labels)
	}
}

// TestAugmentationIsACropAndFlip checks every augmented image against all
// 9×9 crop offsets and both flips of its source: exactly the draws the
// seeds' RandomCrop(32, 4) and RandomHorizontalFlip can make.
func TestAugmentationIsACropAndFlip(t *testing.T) {
	set := patternSet(t, 40)
	cfg := plainConfig(8)
	cfg.RandomCrop, cfg.CropPadding, cfg.RandomFlip, cfg.Seed = true, 4, true, 5
	p, err := NewPipeline(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := p.NewBatch()
	l := p.NewLoader()
	crop := make([]byte, ImageBytes)
	want := make([]float32, ImageBytes)
	tops, flips := map[int]int{}, 0
	for step := range p.StepsPerEpoch() {
		if err := l.Fill(b, 0, step); err != nil {
			t.Fatal(err)
		}
		for j := range b.N {
			src := set.Image(step*8 + j)
			got := b.Images[j*ImageBytes : (j+1)*ImageBytes]
			matches := 0
			for top := range 9 {
				for left := range 9 {
					for _, flip := range []bool{false, true} {
						CropFlip(crop, src, Channels, 32, 32, 4, top, left, flip)
						p.norm.Apply(want, crop, PlaneBytes)
						if slices.Equal(got, want) {
							matches++
							tops[top]++
							if flip {
								flips++
							}
						}
					}
				}
			}
			if matches != 1 {
				t.Fatalf("step %d image %d matches %d crop/flip candidates, want 1", step, j, matches)
			}
		}
	}
	if len(tops) < 6 || flips < 8 || flips > 32 {
		t.Errorf("draws look stuck: crop tops %v, %d of 40 flipped", tops, flips)
	}
}

func TestPipelineResize(t *testing.T) {
	set := patternSet(t, 2)
	cfg := plainConfig(2)
	cfg.Resize = 48
	p, err := NewPipeline(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c, h, w := p.ImageShape(); c != 3 || h != 48 || w != 48 {
		t.Fatalf("image shape %d×%d×%d, want 3×48×48", c, h, w)
	}
	b := p.NewBatch()
	if err := p.NewLoader().Fill(b, 0, 0); err != nil {
		t.Fatal(err)
	}
	large := make([]byte, 3*48*48)
	want := make([]float32, 3*48*48)
	NewResizer(3, 32, 32, 48, 48).Resize(large, set.Image(1))
	p.norm.Apply(want, large, 48*48)
	if !slices.Equal(b.Images[3*48*48:], want) {
		t.Error("resized image 1 differs from Resizer + NormTable")
	}
}

func TestBufferShuffleSemantics(t *testing.T) {
	rows := func(n int) []sample {
		s := make([]sample, n)
		for i := range s {
			s[i] = sample{index: i}
		}
		return s
	}
	indices := func(s []sample) []int {
		out := make([]int, len(s))
		for i, r := range s {
			out[i] = r.index
		}
		return out
	}
	scripted := func(picks ...int) func(int) int {
		return func(n int) int {
			p := picks[0]
			picks = picks[1:]
			if p >= n {
				panic("scripted pick out of range")
			}
			return p
		}
	}
	cases := []struct {
		name  string
		n     int
		size  int
		picks []int
		want  []int
	}{
		// Buffer [0 1 2]; pick 1 → emit 1, last row 2 moves to slot 1, 3
		// refills the tail: [0 2 3]; pick 0 → emit 0: [3 2 4]; pick 2 → 4:
		// input done, drain [3 2]; pick 1 → 2; pick 0 → 3.
		{"fill, refill, drain", 5, 3, []int{1, 0, 2, 1, 0}, []int{1, 0, 4, 2, 3}},
		// Always taking slot 0 keeps the input order: the last row moves
		// into slot 0 and the next input refills the tail.
		{"first slot is first in, first out", 4, 2, []int{0, 0, 0, 0}, []int{0, 1, 2, 3}},
		// Always taking the tail emits the newest row: [0 1] → 1, [0 2] → 2...
		{"last slot", 4, 2, []int{1, 1, 1, 0}, []int{1, 2, 3, 0}},
		// A buffer larger than the input is a full shuffle of it.
		{"buffer larger than input", 3, 10, []int{2, 0, 0}, []int{2, 0, 1}},
	}
	for _, tc := range cases {
		r := rows(tc.n)
		bufferShuffle(r, nil, tc.size, scripted(tc.picks...))
		if got := indices(r); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// With random picks: a permutation, and no row moves more than size-1
	// places earlier.
	rg := newRNG(3)
	r := rows(1000)
	bufferShuffle(r, nil, 10, rg.intn)
	got := indices(r)
	moved := 0
	for pos, idx := range got {
		if idx-pos > 9 {
			t.Fatalf("row %d emitted at %d, more than 9 places early", idx, pos)
		}
		if idx != pos {
			moved++
		}
	}
	slices.Sort(got)
	for i, v := range got {
		if v != i {
			t.Fatalf("not a permutation at %d", i)
		}
	}
	if moved < 800 {
		t.Errorf("only %d of 1000 rows moved", moved)
	}
}

func TestPipelineShardsPartitionTheEpoch(t *testing.T) {
	set := patternSet(t, 103)
	const shards = 4
	for _, buffer := range []int{0, 10} {
		count := make([]int, set.Len())
		for k := range shards {
			cfg := SeedConfig(shards, k, 11)
			cfg.ShuffleBuffer = buffer
			cfg.BatchSize = 5
			p, err := NewPipeline(set, cfg)
			if err != nil {
				t.Fatal(err)
			}
			order := p.Order(2)
			if len(order) != 26 {
				t.Fatalf("shard %d reads %d samples, want ceil(103/4) = 26", k, len(order))
			}
			want, _ := ShardIndices(nil, set.Len(), shards, k, EpochPermutation(nil, set.Len(), 11, 2))
			if buffer == 0 && !slices.Equal(order, want) {
				t.Errorf("shard %d order differs from ShardIndices with the epoch permutation", k)
			}
			slices.Sort(order)
			slices.Sort(want)
			if !slices.Equal(order, want) {
				t.Errorf("buffer %d shard %d reads other samples than the sampler assigns", buffer, k)
			}
			for _, i := range order {
				count[i]++
			}
		}
		repeats := 0
		for i, c := range count {
			if c == 0 {
				t.Fatalf("buffer %d: sample %d read by no shard", buffer, i)
			}
			repeats += c - 1
		}
		if repeats != 26*4-103 {
			t.Errorf("buffer %d: %d repeated reads, want %d", buffer, repeats, 26*4-103)
		}
	}
}

func TestPipelineDeterminism(t *testing.T) {
	set := patternSet(t, 64)
	cfg := SeedConfig(2, 1, 99)
	cfg.BatchSize = 4
	p, err := NewPipeline(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := NewPipeline(set, cfg)
	// The same batch from fresh loaders, and out of order, is identical.
	a, b := p.NewBatch(), q.NewBatch()
	la, lb := p.NewLoader(), q.NewLoader()
	for _, at := range [][2]int{{3, 5}, {0, 0}, {3, 5}, {1, 7}} {
		if err := la.Fill(a, at[0], at[1]); err != nil {
			t.Fatal(err)
		}
		if err := lb.Fill(b, 3, 5); err != nil {
			t.Fatal(err)
		}
		if lb.Fill(b, at[0], at[1]) != nil || !slices.Equal(a.Images, b.Images) || !slices.Equal(a.Labels, b.Labels) {
			t.Fatalf("batch (epoch %d, step %d) depends on what was built before", at[0], at[1])
		}
	}
	// Epochs differ; other seeds differ.
	la.Fill(a, 0, 0)
	lb.Fill(b, 1, 0)
	if slices.Equal(a.Images, b.Images) {
		t.Error("epochs 0 and 1 start with the same batch")
	}
	cfg.Seed = 100
	r, _ := NewPipeline(set, cfg)
	r.NewLoader().Fill(b, 0, 0)
	if slices.Equal(a.Images, b.Images) {
		t.Error("seeds 99 and 100 give the same first batch")
	}
}

func TestFillDoesNotAllocate(t *testing.T) {
	set := patternSet(t, 64)
	cfg := SeedConfig(2, 0, 1)
	cfg.BatchSize = 8
	p, err := NewPipeline(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, l := p.NewBatch(), p.NewLoader()
	if err := l.Fill(b, 0, 0); err != nil {
		t.Fatal(err)
	}
	step := 0
	allocs := testing.AllocsPerRun(20, func() {
		step = (step + 1) % p.StepsPerEpoch()
		if err := l.Fill(b, 0, step); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Fill allocates %.1f times per batch in steady state", allocs)
	}
}

func TestPipelineConfigErrors(t *testing.T) {
	set := patternSet(t, 10)
	cases := []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"batch 0", func(c *Config) { c.BatchSize = 0 }, "invalid data config: batch_size 0 must be at least 1"},
		{"shard id", func(c *Config) { c.NumShards, c.ShardID = 2, 2 }, "invalid data config: shard_id 2 must be in [0, 1]"},
		{"buffer 1", func(c *Config) { c.ShuffleBuffer = 1 }, "invalid data config: shuffle buffer_size 1 must be 0 (off) or at least 2"},
		{"padding", func(c *Config) { c.RandomCrop, c.CropPadding = true, 40 }, "invalid data config: crop padding 40 must be in [0, 32]"},
		{"resize", func(c *Config) { c.Resize = -1 }, "invalid data config: resize -1 must be in [0, 1024]"},
		{"std", func(c *Config) { c.Std[1] = 0 }, "invalid data config: normalize std[1] is 0"},
		{"shard smaller than batch", func(c *Config) { c.NumShards, c.BatchSize = 4, 4 },
			"invalid data config: shard 0 reads 3 samples of 10, fewer than one batch of 4 with drop_remainder"},
	}
	for _, tc := range cases {
		cfg := plainConfig(2)
		tc.change(&cfg)
		_, err := NewPipeline(set, cfg)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	p, _ := NewPipeline(set, plainConfig(2))
	if err := p.NewLoader().Fill(p.NewBatch(), 0, 5); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("Fill past the epoch: error %v, want ErrConfig", err)
	}
}

func TestFillIntoCallerBuffers(t *testing.T) {
	p, err := NewPipeline(patternSet(t, 6), plainConfig(3))
	if err != nil {
		t.Fatal(err)
	}
	images := make([]float32, 3*ImageBytes)
	labels := make([]int32, 3)
	b := &Batch{Images: images, Labels: labels}
	if err := p.NewLoader().Fill(b, 0, 1); err != nil {
		t.Fatal(err)
	}
	if &b.Images[0] != &images[0] || &b.Labels[0] != &labels[0] {
		t.Error("Fill did not write into the caller's slices")
	}
	if !slices.Equal(labels, []int32{3, 4, 5}) || images[0] != (21-128)/128.0 {
		t.Errorf("caller buffers hold labels %v, first value %v", labels, images[0])
	}
	small := &Batch{Images: make([]float32, 10), Labels: make([]int32, 3)}
	err = p.NewLoader().Fill(small, 0, 0)
	if want := "invalid data config: batch buffer holds 10 values and 3 labels, need 9216 (3 images of 3x32x32)"; err == nil || err.Error() != want {
		t.Errorf("small buffer: %v, want %q", err, want)
	}
}

// A window keeps exactly that box of every augmented image, and the batch
// holds nothing else; a window outside the image is refused.
func TestPipelineWindow(t *testing.T) {
	set := patternSet(t, 64)
	cfg := SeedConfig(2, 1, 7)
	cfg.BatchSize = 4
	full, err := NewPipeline(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Window = Window{Offset: [3]int{1, 16, 8}, Shape: [3]int{2, 16, 8}}
	win, err := NewPipeline(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c, h, w := win.ImageShape(); c != 2 || h != 16 || w != 8 {
		t.Fatalf("window image shape %dx%dx%d, want 2x16x8", c, h, w)
	}
	a, b := full.NewBatch(), win.NewBatch()
	if err := full.NewLoader().Fill(a, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := win.NewLoader().Fill(b, 1, 2); err != nil {
		t.Fatal(err)
	}
	if len(b.Images) != 4*2*16*8 || !slices.Equal(a.Labels, b.Labels) {
		t.Fatalf("windowed batch: %d values, labels %v; want %d values, labels %v", len(b.Images), b.Labels, 4*2*16*8, a.Labels)
	}
	i := 0
	for n := range 4 {
		for c := 1; c < 3; c++ {
			for y := 16; y < 32; y++ {
				for x := 8; x < 16; x++ {
					if want := a.Images[((n*Channels+c)*ImageSize+y)*ImageSize+x]; b.Images[i] != want {
						t.Fatalf("image %d channel %d pixel (%d,%d) = %v, the whole image's %v", n, c, y, x, b.Images[i], want)
					}
					i++
				}
			}
		}
	}
	cfg.Window = Window{Offset: [3]int{0, 20, 0}, Shape: [3]int{3, 16, 32}}
	if _, err := NewPipeline(set, cfg); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("a window past row 32: %v, want an error naming the window", err)
	}
}
