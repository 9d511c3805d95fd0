package data

import "fmt"

// Config is the training input pipeline of the seeds' create_dataset:
//
//	ds.Cifar10Dataset(path, num_shards=rank_size, shard_id=rank_id)
//	  .map(TypeCast(int32), "label")
//	  .map([RandomCrop((32, 32), (4, 4, 4, 4)), RandomHorizontalFlip(),
//	        Resize((224, 224)), Rescale(1/255, 0),
//	        Normalize((0.4465, 0.4822, 0.4914), (0.2010, 0.1994, 0.2023)),
//	        HWC2CHW()], "image")
//	  .shuffle(buffer_size=10).batch(32, drop_remainder=True).repeat(n)
//
// Every random choice is a pure function of Seed, the epoch number and the
// sample's position, so the stream of an epoch is the same whatever ran
// before it (resume from epoch k) and whichever goroutine builds it.
type Config struct {
	// BatchSize is the number of samples per batch (seeds: 32).
	BatchSize int
	// DropRemainder drops a last, short batch of an epoch (seeds: true).
	// Without it the last batch holds the remaining samples.
	DropRemainder bool
	// NumShards and ShardID select this rank's share of the data set by
	// MindSpore's DistributedSampler rule (see ShardIndices). 1 and 0 read
	// everything.
	NumShards, ShardID int
	// Shuffle permutes the whole data set afresh every epoch before
	// sharding, as Cifar10Dataset does when num_shards is given and shuffle
	// is left unset.
	Shuffle bool
	// ShuffleBuffer is dataset.shuffle(buffer_size) applied after the map:
	// MindSpore's buffer shuffle (see bufferShuffle). 0 turns it off; the
	// seeds use 10. MindSpore requires at least 2.
	ShuffleBuffer int
	// Seed is the base seed of the sampler, the augmentations and the
	// shuffle buffer.
	Seed uint64
	// RandomCrop takes a 32×32 crop at a uniformly random place in the image
	// zero-padded by CropPadding on every side (seeds: padding 4).
	RandomCrop  bool
	CropPadding int
	// RandomFlip mirrors the image left–right with probability 1/2.
	RandomFlip bool
	// Resize is the output height and width after a bilinear resize; 0 keeps
	// 32×32. The seeds resize to 224×224 for ResNet-50, which costs 49 times
	// the pixels of every later step and of the network's input: too much on
	// a CPU, so mspipe's default keeps 32.
	Resize int
	// Rescale and Shift map a byte v to v*Rescale + Shift (seeds: 1/255, 0).
	Rescale, Shift float32
	// Mean and Std normalize each channel after Rescale: (x - Mean)/Std. The
	// seeds' values are used as given, in channel order R, G, B.
	Mean, Std [Channels]float32
	// Window, when its Shape is not zero, keeps only that box of every
	// output image (MindSpore's dataset_strategy cutting images among
	// devices): batches hold Shape's C×H×W values per image and only they
	// are normalized.
	Window Window
}

// Window is a box of an output image: channels, rows and columns from
// Offset, Shape of each.
type Window struct {
	Offset, Shape [3]int
}

// IsSet reports whether the window was given.
func (w Window) IsSet() bool { return w.Shape != [3]int{} }

// SeedConfig returns the seeds' create_dataset settings for one rank, with
// Resize turned off (see Config.Resize).
func SeedConfig(numShards, shardID int, seed uint64) Config {
	return Config{
		BatchSize:     32,
		DropRemainder: true,
		NumShards:     numShards,
		ShardID:       shardID,
		Shuffle:       true,
		ShuffleBuffer: 10,
		Seed:          seed,
		RandomCrop:    true,
		CropPadding:   4,
		RandomFlip:    true,
		Rescale:       1.0 / 255.0,
		Shift:         0,
		Mean:          [Channels]float32{0.4465, 0.4822, 0.4914},
		Std:           [Channels]float32{0.2010, 0.1994, 0.2023},
	}
}

// EvalConfig returns the settings for evaluation: the seeds' Rescale and
// Normalize, no augmentation, no shuffling, and a short last batch kept so
// every sample of the shard is scored once (plus the sampler's padding).
func EvalConfig(numShards, shardID, batchSize int) Config {
	c := SeedConfig(numShards, shardID, 0)
	c.BatchSize = batchSize
	c.DropRemainder = false
	c.Shuffle = false
	c.ShuffleBuffer = 0
	c.RandomCrop = false
	c.RandomFlip = false
	return c
}

func (c *Config) validate(n int) error {
	if err := checkShard(n, c.NumShards, c.ShardID); err != nil {
		return err
	}
	switch {
	case c.BatchSize < 1:
		return fmt.Errorf("%w: batch_size %d must be at least 1", ErrConfig, c.BatchSize)
	case c.ShuffleBuffer == 1 || c.ShuffleBuffer < 0:
		return fmt.Errorf("%w: shuffle buffer_size %d must be 0 (off) or at least 2", ErrConfig, c.ShuffleBuffer)
	case c.RandomCrop && (c.CropPadding < 0 || c.CropPadding > ImageSize):
		return fmt.Errorf("%w: crop padding %d must be in [0, %d]", ErrConfig, c.CropPadding, ImageSize)
	case c.Resize < 0 || c.Resize > 1024:
		return fmt.Errorf("%w: resize %d must be in [0, 1024]", ErrConfig, c.Resize)
	}
	if c.Window.IsSet() {
		side := ImageSize
		if c.Resize > 0 {
			side = c.Resize
		}
		for k, size := range [3]int{Channels, side, side} {
			if o, n := c.Window.Offset[k], c.Window.Shape[k]; o < 0 || n < 1 || o+n > size {
				return fmt.Errorf("%w: window %v+%v is outside the %dx%dx%d image", ErrConfig, c.Window.Offset, c.Window.Shape, Channels, side, side)
			}
		}
	}
	for ch, s := range c.Std {
		if s == 0 {
			return fmt.Errorf("%w: normalize std[%d] is 0", ErrConfig, ch)
		}
	}
	if c.DropRemainder && ShardSize(n, c.NumShards) < c.BatchSize {
		return fmt.Errorf("%w: shard %d reads %d samples of %d, fewer than one batch of %d with drop_remainder",
			ErrConfig, c.ShardID, ShardSize(n, c.NumShards), n, c.BatchSize)
	}
	return nil
}

// Pipeline turns a Set into batches for one shard. It is immutable and safe
// for concurrent use; the mutable scratch of batch building lives in Loaders.
type Pipeline struct {
	set      *Set
	cfg      Config
	norm     *NormTable
	resizer  *Resizer
	perShard int
	steps    int
	side     int
}

// NewPipeline checks cfg against set and prepares the transforms.
func NewPipeline(set *Set, cfg Config) (*Pipeline, error) {
	if set == nil {
		return nil, fmt.Errorf("%w: no data set", ErrConfig)
	}
	if err := cfg.validate(set.Len()); err != nil {
		return nil, err
	}
	p := &Pipeline{set: set, cfg: cfg, side: ImageSize}
	p.norm = NewNormTable(cfg.Rescale, cfg.Shift, cfg.Mean, cfg.Std)
	if cfg.Resize > 0 && cfg.Resize != ImageSize {
		p.resizer = NewResizer(Channels, ImageSize, ImageSize, cfg.Resize, cfg.Resize)
		p.side = cfg.Resize
	}
	p.perShard = ShardSize(set.Len(), cfg.NumShards)
	p.steps = p.perShard / cfg.BatchSize
	if !cfg.DropRemainder && p.perShard%cfg.BatchSize != 0 {
		p.steps++
	}
	return p, nil
}

// Config returns the pipeline's settings.
func (p *Pipeline) Config() Config { return p.cfg }

// SamplesPerEpoch is the number of samples this shard reads per epoch,
// ceil(n/num_shards).
func (p *Pipeline) SamplesPerEpoch() int { return p.perShard }

// StepsPerEpoch is the number of batches per epoch.
func (p *Pipeline) StepsPerEpoch() int { return p.steps }

// ImageShape returns the C, H, W of one output image (its window when the
// configuration sets one).
func (p *Pipeline) ImageShape() (c, h, w int) {
	if win := p.cfg.Window; win.IsSet() {
		return win.Shape[0], win.Shape[1], win.Shape[2]
	}
	return Channels, p.side, p.side
}

// Batch is one batch of float32 images in NCHW layout and int32 labels. A
// Batch is allocated once at full size (NewBatch, or a caller's own Images
// and Labels slices with enough capacity) and refilled in place.
type Batch struct {
	// Images holds N×C×H×W values, image-major, then channel, row, column.
	Images []float32
	// Labels holds N labels in 0..9.
	Labels []int32
	// N is the number of samples, BatchSize except for a short last batch.
	N, C, H, W int
	// Epoch and Step say where in the stream the batch belongs (0-based).
	Epoch, Step int

	images []float32 // full-size backing arrays
	labels []int32
}

// NewBatch allocates a Batch big enough for this pipeline's batches.
func (p *Pipeline) NewBatch() *Batch {
	c, h, w := p.ImageShape()
	return &Batch{
		images: make([]float32, p.cfg.BatchSize*c*h*w),
		labels: make([]int32, p.cfg.BatchSize),
		C:      c, H: h, W: w,
	}
}

// sample is one entry of an epoch's read order: the data set index and the
// sampler position (num_shards*c + shard_id), which keys its augmentation.
type sample struct {
	index, position int
}

// Loader builds batches of a Pipeline. It owns the scratch memory of that
// work, so it is used by one goroutine at a time; after its first batch of
// an epoch it does not allocate.
type Loader struct {
	p      *Pipeline
	epoch  int
	perm   []int
	order  []sample
	buffer []sample
	crop   []byte
	large  []byte

	shuffleRNG rng
}

// NewLoader returns a Loader for p.
func (p *Pipeline) NewLoader() *Loader {
	l := &Loader{p: p, epoch: -1, order: make([]sample, p.perShard), crop: make([]byte, ImageBytes)}
	if p.resizer != nil {
		l.large = make([]byte, Channels*p.side*p.side)
	}
	if p.cfg.ShuffleBuffer > 0 {
		l.buffer = make([]sample, 0, p.cfg.ShuffleBuffer)
	}
	return l
}

// Order returns the data set indices of an epoch in the order this shard
// emits them (before drop_remainder).
func (p *Pipeline) Order(epoch int) []int {
	l := p.NewLoader()
	l.prepareEpoch(epoch)
	out := make([]int, len(l.order))
	for i, s := range l.order {
		out[i] = s.index
	}
	return out
}

func (l *Loader) prepareEpoch(epoch int) {
	if l.epoch == epoch {
		return
	}
	p, cfg := l.p, &l.p.cfg
	n := p.set.Len()
	var perm []int
	if cfg.Shuffle {
		l.perm = EpochPermutation(l.perm, n, cfg.Seed, epoch)
		perm = l.perm
	}
	// Same rule as ShardIndices, keeping the sampler position as well.
	for c := range l.order {
		pos := cfg.NumShards*c + cfg.ShardID
		idx := pos % n
		if perm != nil {
			idx = perm[idx]
		}
		l.order[c] = sample{index: idx, position: pos}
	}
	if cfg.ShuffleBuffer > 0 {
		l.shuffleRNG = newRNG(deriveSeed(cfg.Seed, tagShuffle, uint64(epoch), uint64(cfg.ShardID)))
		l.buffer = bufferShuffle(l.order, l.buffer, cfg.ShuffleBuffer, l.shuffleRNG.intn)
	}
	l.epoch = epoch
}

// bufferShuffle reorders rows in place with MindSpore's shuffle(buffer_size)
// semantics (ShuffleOp): fill a buffer with the first size rows; then
// repeatedly emit a uniformly chosen buffer slot, move the buffer's last row
// into that slot, and refill the last slot with the next input row; once the
// input is exhausted, keep emitting while shrinking the buffer. A row can
// therefore move at most size-1 places earlier but arbitrarily later.
// Output position i is written only after input row i has been read, so the
// shuffle works in place. MindSpore draws slots with mt19937_64 modulo the
// buffer length and keeps its generator running across epochs; mspipe draws
// them with SplitMix64 seeded per epoch and shard. pick(n) returns the slot
// in [0, n).
func bufferShuffle(rows, buf []sample, size int, pick func(n int) int) []sample {
	buf = buf[:0]
	next := 0
	for next < len(rows) && len(buf) < size {
		buf = append(buf, rows[next])
		next++
	}
	active := next < len(rows)
	last := len(buf) - 1
	out := 0
	for last >= 0 {
		slot := pick(last + 1)
		rows[out] = buf[slot]
		out++
		buf[slot] = buf[last]
		if active {
			if next < len(rows) {
				buf[last] = rows[next]
				next++
			} else {
				active = false
			}
		}
		if !active {
			last--
		}
	}
	return buf
}

// Fill writes batch step of epoch into dst, reusing dst's memory. It is a
// pure function of (pipeline, epoch, step): calling it in any order, on any
// Loader, gives the same batch.
func (l *Loader) Fill(dst *Batch, epoch, step int) error {
	p, cfg := l.p, &l.p.cfg
	if epoch < 0 || step < 0 || step >= p.steps {
		return fmt.Errorf("%w: batch (epoch %d, step %d) is outside 0..%d steps per epoch", ErrConfig, epoch, step, p.steps)
	}
	c, h, w := p.ImageShape()
	if len(dst.images) < cfg.BatchSize*c*h*w || len(dst.labels) < cfg.BatchSize {
		// A caller-provided Batch: adopt its slices' memory.
		dst.images, dst.labels = dst.Images[:cap(dst.Images)], dst.Labels[:cap(dst.Labels)]
		if len(dst.images) < cfg.BatchSize*c*h*w || len(dst.labels) < cfg.BatchSize {
			return fmt.Errorf("%w: batch buffer holds %d values and %d labels, need %d (%d images of %dx%dx%d)",
				ErrConfig, len(dst.images), len(dst.labels), cfg.BatchSize*c*h*w, cfg.BatchSize, c, h, w)
		}
	}
	l.prepareEpoch(epoch)
	first := step * cfg.BatchSize
	count := min(cfg.BatchSize, len(l.order)-first)
	size := c * h * w
	dst.N, dst.C, dst.H, dst.W = count, c, h, w
	dst.Epoch, dst.Step = epoch, step
	dst.Images = dst.images[:count*size]
	dst.Labels = dst.labels[:count]
	for j := range count {
		s := l.order[first+j]
		dst.Labels[j] = int32(p.set.Label(s.index))
		l.transform(dst.Images[j*size:(j+1)*size], s, epoch)
	}
	return nil
}

// transform runs the image map of one sample: crop, flip, resize, then
// rescale and normalize, writing CHW float32 into out.
func (l *Loader) transform(out []float32, s sample, epoch int) {
	p, cfg := l.p, &l.p.cfg
	img := p.set.Image(s.index)
	if cfg.RandomCrop || cfg.RandomFlip {
		r := newRNG(deriveSeed(cfg.Seed, tagAugment, uint64(epoch), uint64(s.position)))
		top, left, pad := 0, 0, 0
		if cfg.RandomCrop {
			pad = cfg.CropPadding
			top = r.intn(2*pad + 1)
			left = r.intn(2*pad + 1)
		}
		flip := cfg.RandomFlip && r.intn(2) == 1
		CropFlip(l.crop, img, Channels, ImageSize, ImageSize, pad, top, left, flip)
		img = l.crop
	}
	if p.resizer != nil {
		p.resizer.Resize(l.large, img)
		img = l.large
	}
	if win := cfg.Window; win.IsSet() {
		p.norm.ApplyWindow(out, img, p.side, win.Offset, win.Shape)
		return
	}
	p.norm.Apply(out, img, p.side*p.side)
}
