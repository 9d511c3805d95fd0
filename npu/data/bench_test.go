package data

import (
	"context"
	"testing"
)

func benchSet(b *testing.B) *Set {
	b.Helper()
	raw, err := SynthesizeBatch(context.Background(), SynthConfig{Seed: 1, TrainPerBatch: 2048, TestRecords: 1}, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	set, err := ParseBatch("bench", raw)
	if err != nil {
		b.Fatal(err)
	}
	return set
}

func benchFill(b *testing.B, cfg Config) {
	p, err := NewPipeline(benchSet(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	batch, loader := p.NewBatch(), p.NewLoader()
	steps := p.StepsPerEpoch()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := loader.Fill(batch, i/steps, i%steps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
}

// BenchmarkPipeline is the seeds' transform pipeline at batch 32 on 32×32
// images: sampler, RandomCrop, RandomHorizontalFlip, Rescale, Normalize,
// buffer shuffle, batch.
func BenchmarkPipeline(b *testing.B) { benchFill(b, SeedConfig(1, 0, 1)) }

// BenchmarkPipelineResize224 adds the seeds' Resize((224, 224)).
func BenchmarkPipelineResize224(b *testing.B) {
	cfg := SeedConfig(1, 0, 1)
	cfg.Resize = 224
	benchFill(b, cfg)
}

// BenchmarkIterator measures batches delivered through the prefetching
// iterator (producer goroutine plus hand-over).
func BenchmarkIterator(b *testing.B) {
	p, err := NewPipeline(benchSet(b), SeedConfig(1, 0, 1))
	if err != nil {
		b.Fatal(err)
	}
	it, err := p.Iterate(context.Background(), 0, 1<<20, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := it.Next(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
}

// BenchmarkSynthesize measures synthetic images generated per second.
func BenchmarkSynthesize(b *testing.B) {
	cfg := SynthConfig{Seed: 1, TrainPerBatch: 256, TestRecords: 1}
	b.ResetTimer()
	for b.Loop() {
		if _, err := SynthesizeBatch(context.Background(), cfg, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*256)/b.Elapsed().Seconds(), "images/s")
}
