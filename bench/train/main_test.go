package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resnet20Params counts ResNet-20's parameters from its architecture, apart
// from the code that builds it: 3×3 convolutions without bias, a BatchNorm
// (gamma, beta trainable; moving mean and variance not) after each, 1×1
// down-sampling convolutions where a stage changes width, Dense with bias.
func resnet20Params(classes int) (trainable, total int) {
	conv := func(in, out, k int) { trainable += in * out * k * k }
	bn := func(c int) { trainable += 2 * c; total += 2 * c }
	conv(3, 16, 3)
	bn(16)
	in := 16
	for _, out := range []int{16, 32, 64} {
		for b := 0; b < 3; b++ {
			conv(in, out, 3)
			bn(out)
			conv(out, out, 3)
			bn(out)
			if in != out {
				conv(in, out, 1)
				bn(out)
			}
			in = out
		}
	}
	trainable += in*classes + classes
	return trainable, trainable + total
}

func TestRunReportsAMeasuredTrainingStep(t *testing.T) {
	tests := []struct {
		name string
		cfg  config
	}{
		{"one thread", config{Threads: 1, Batch: 2, Size: 8, Classes: 4, Warmup: 1, Steps: 2, Seed: 3}},
		{"two threads, no warm-up", config{Threads: 2, Batch: 3, Size: 8, Classes: 10, Warmup: 0, Steps: 1, Seed: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(tt.cfg, &out); err != nil {
				t.Fatal(err)
			}
			var res result
			dec := json.NewDecoder(&out)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&res); err != nil {
				t.Fatalf("decode %q: %v", out.String(), err)
			}
			trainable, total := resnet20Params(tt.cfg.Classes)
			if res.ParamsTrainable != trainable || res.ParamsTotal != total {
				t.Errorf("parameters %d trainable / %d total, want %d / %d", res.ParamsTrainable, res.ParamsTotal, trainable, total)
			}
			if res.Side != "mspipe" || res.Model != "resnet20" || res.Threads != tt.cfg.Threads || res.GOMAXPROCS != tt.cfg.Threads ||
				res.Batch != tt.cfg.Batch || res.Steps != tt.cfg.Steps || res.Warmup != tt.cfg.Warmup {
				t.Errorf("result does not echo the config %+v: %+v", tt.cfg, res)
			}
			if !(res.Seconds > 0) {
				t.Fatalf("seconds %v, want > 0", res.Seconds)
			}
			if want := float64(tt.cfg.Batch*tt.cfg.Steps) / res.Seconds; res.ImagesPerSec != want {
				t.Errorf("images/s %v, want batch·steps/seconds = %v", res.ImagesPerSec, want)
			}
			if !(res.BestStepIPS >= res.MedianStepIPS && res.MedianStepIPS > 0) {
				t.Errorf("best step %v images/s below the median %v", res.BestStepIPS, res.MedianStepIPS)
			}
			// Cross entropy of 10 or 4 classes starts near ln(classes).
			if !(res.FirstLoss > 0.5 && res.FirstLoss < 10 && res.LastLoss > 0) {
				t.Errorf("losses %v then %v, want a finite cross entropy", res.FirstLoss, res.LastLoss)
			}
		})
	}
}

func TestRunRejectsBadSettings(t *testing.T) {
	good := config{Threads: 1, Batch: 2, Size: 8, Classes: 10, Warmup: 0, Steps: 1}
	tests := []struct {
		name string
		edit func(*config)
	}{
		{"threads", func(c *config) { c.Threads = 0 }},
		{"batch", func(c *config) { c.Batch = 0 }},
		{"size", func(c *config) { c.Size = -1 }},
		{"classes", func(c *config) { c.Classes = 0 }},
		{"warmup", func(c *config) { c.Warmup = -1 }},
		{"steps", func(c *config) { c.Steps = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			var out bytes.Buffer
			err := run(cfg, &out)
			if !errors.Is(err, errConfig) {
				t.Fatalf("error %v, want %v", err, errConfig)
			}
			if !bytes.Contains([]byte(err.Error()), []byte("-"+tt.name)) {
				t.Errorf("error %q does not name -%s", err, tt.name)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q for a bad setting", out.String())
			}
		})
	}
}

func TestRunWritesCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	cfg := config{Threads: 1, Batch: 2, Size: 8, Classes: 10, Warmup: 0, Steps: 2, CPUProfile: path}
	if err := run(cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A pprof profile is a gzip-compressed protocol buffer.
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		t.Fatalf("profile of %d bytes is not gzip data", len(data))
	}
}

func TestRunReportsProfileWriteError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "cpu.pprof")
	cfg := config{Threads: 1, Batch: 2, Size: 8, Classes: 10, Warmup: 0, Steps: 1, CPUProfile: path}
	err := run(cfg, io.Discard)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v, want one naming %s", err, path)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{{[]float64{2}, 2}, {[]float64{1, 3}, 2}, {[]float64{1, 2, 9}, 2}, {[]float64{1, 2, 4, 9}, 3}}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
