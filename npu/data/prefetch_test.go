package data

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"
)

func testPipeline(t testing.TB, n, batch int) *Pipeline {
	t.Helper()
	cfg := SeedConfig(2, 1, 21)
	cfg.BatchSize = batch
	p, err := NewPipeline(patternSet(t, n), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// collect drains an iterator, copying each batch (batches are reused).
func collect(t *testing.T, it *Iterator) []Batch {
	t.Helper()
	var out []Batch
	for {
		b, err := it.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Batch{
			Images: slices.Clone(b.Images), Labels: slices.Clone(b.Labels),
			N: b.N, Epoch: b.Epoch, Step: b.Step,
		})
	}
}

func TestIteratorOrderMatchesFill(t *testing.T) {
	p := testPipeline(t, 90, 8) // 45 samples per shard: 5 steps per epoch
	want := p.NewBatch()
	loader := p.NewLoader()
	for _, prefetch := range []int{0, 1, 3} {
		it, err := p.Iterate(context.Background(), 1, 3, prefetch)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, it)
		it.Close()
		if len(got) != 3*p.StepsPerEpoch() {
			t.Fatalf("prefetch %d: %d batches, want %d", prefetch, len(got), 3*p.StepsPerEpoch())
		}
		for i, b := range got {
			epoch, step := 1+i/p.StepsPerEpoch(), i%p.StepsPerEpoch()
			if b.Epoch != epoch || b.Step != step {
				t.Fatalf("prefetch %d: batch %d is (epoch %d, step %d), want (%d, %d)", prefetch, i, b.Epoch, b.Step, epoch, step)
			}
			if err := loader.Fill(want, epoch, step); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(b.Images, want.Images) || !slices.Equal(b.Labels, want.Labels) {
				t.Fatalf("prefetch %d: batch (epoch %d, step %d) differs from Fill", prefetch, epoch, step)
			}
		}
	}
}

func TestIteratorResumeFromEpoch(t *testing.T) {
	p := testPipeline(t, 90, 8)
	full, _ := p.Iterate(context.Background(), 0, 4, 2)
	all := collect(t, full)
	full.Close()
	resumed, _ := p.Iterate(context.Background(), 2, 2, 2)
	tail := collect(t, resumed)
	resumed.Close()
	skip := 2 * p.StepsPerEpoch()
	if len(tail) != len(all)-skip {
		t.Fatalf("resumed stream has %d batches, want %d", len(tail), len(all)-skip)
	}
	for i := range tail {
		if !slices.Equal(tail[i].Images, all[skip+i].Images) || !slices.Equal(tail[i].Labels, all[skip+i].Labels) {
			t.Fatalf("resumed batch %d differs from the uninterrupted run", i)
		}
	}
}

// waitGoroutines waits until the goroutine count is back to at most want.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines still running, want %d:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestIteratorCancellation(t *testing.T) {
	p := testPipeline(t, 90, 8)
	base := runtime.NumGoroutine()
	inSubtest := base + 1 // a subtest runs on a goroutine of its own

	t.Run("cancel mid-stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		it, _ := p.Iterate(ctx, 0, 100, 2)
		for range 3 {
			if _, err := it.Next(); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		// Next reports the cancellation at once, though batches are queued.
		if _, err := it.Next(); !errors.Is(err, context.Canceled) {
			t.Errorf("Next after cancel: %v, want context.Canceled", err)
		}
		it.Close()
		waitGoroutines(t, inSubtest)
	})

	t.Run("close without reading", func(t *testing.T) {
		it, _ := p.Iterate(context.Background(), 0, 100, 1)
		time.Sleep(10 * time.Millisecond) // let the producer block on a full queue
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		waitGoroutines(t, inSubtest)
		if _, err := it.Next(); !errors.Is(err, context.Canceled) {
			t.Errorf("Next after Close: %v, want context.Canceled", err)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		it, _ := p.Iterate(ctx, 0, 1_000_000, 1)
		defer it.Close()
		var err error
		for err == nil {
			_, err = it.Next()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Next past the deadline: %v, want context.DeadlineExceeded", err)
		}
	})
	waitGoroutines(t, base)
}

func TestIteratorEmptyRangeAndErrors(t *testing.T) {
	p := testPipeline(t, 90, 8)
	it, err := p.Iterate(context.Background(), 5, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := it.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("zero epochs: %v, want io.EOF", err)
	}
	it.Close()
	if _, err := p.Iterate(context.Background(), 0, 1, -1); !errors.Is(err, ErrConfig) {
		t.Errorf("negative prefetch: %v, want ErrConfig", err)
	}
}
