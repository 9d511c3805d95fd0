package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/tensor"
)

// config is one benchmark run. The defaults are the issue's: batch 32 of
// 3×32×32 images, 10 classes, SGD with momentum 0.9 at learning rate 0.01
// and no weight decay (as the PyTorch side).
type config struct {
	Threads int
	Batch   int
	Size    int
	Classes int
	Warmup  int
	Steps   int
	Seed    uint64
	// CPUProfile, when set, is where a pprof CPU profile of the timed steps
	// is written.
	CPUProfile string
}

// result is the JSON line the benchmark prints; run.sh reads the same fields
// from the PyTorch side.
type result struct {
	Side          string  `json:"side"`
	Model         string  `json:"model"`
	Threads       int     `json:"threads"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	Batch         int     `json:"batch"`
	ImageSize     int     `json:"image_size"`
	Warmup        int     `json:"warmup"`
	Steps         int     `json:"steps"`
	Seconds       float64 `json:"seconds"`
	ImagesPerSec  float64 `json:"images_per_sec"`
	MedianStepIPS float64 `json:"median_step_images_per_sec"`
	BestStepIPS   float64 `json:"best_step_images_per_sec"`
	// PageFaultsPerStep is the minor page faults of a timed step (-1:
	// unknown on this system).
	PageFaultsPerStep float64 `json:"page_faults_per_step"`
	ParamsTrainable   int     `json:"params_trainable"`
	ParamsTotal       int     `json:"params_total"`
	FirstLoss         float32 `json:"first_loss"`
	LastLoss          float32 `json:"last_loss"`
	GoVersion         string  `json:"go_version"`
}

func main() {
	var cfg config
	flag.IntVar(&cfg.Threads, "threads", 1, "GOMAXPROCS and model worker goroutines")
	flag.IntVar(&cfg.Batch, "batch", 32, "images per step")
	flag.IntVar(&cfg.Size, "size", 32, "image height and width")
	flag.IntVar(&cfg.Classes, "classes", 10, "classes of the end_point layer")
	flag.IntVar(&cfg.Warmup, "warmup", 3, "untimed steps before the timed ones")
	flag.IntVar(&cfg.Steps, "steps", 20, "timed steps")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the parameters and the batch")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed steps to this file")
	flag.Parse()
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/train:", err)
		os.Exit(1)
	}
}

func run(cfg config, w io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	prev := runtime.GOMAXPROCS(cfg.Threads)
	defer runtime.GOMAXPROCS(prev)
	res, err := measure(cfg)
	if err != nil {
		return err
	}
	line, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

func (c config) validate() error {
	for _, f := range []struct {
		name     string
		val, min int
	}{{"threads", c.Threads, 1}, {"batch", c.Batch, 1}, {"size", c.Size, 1}, {"classes", c.Classes, 1}, {"warmup", c.Warmup, 0}, {"steps", c.Steps, 1}} {
		if f.val < f.min {
			return fmt.Errorf("-%s %d, want at least %d: %w", f.name, f.val, f.min, errConfig)
		}
	}
	return nil
}

// trainStep is one forward + loss + backward + optimizer update.
type trainStep struct {
	model  *nn.Model
	loss   *nn.SoftmaxCrossEntropyExpand
	opt    *optim.Momentum
	x      *tensor.Tensor
	labels []int32
}

func (s *trainStep) run() (float32, error) {
	logits, err := s.model.Forward(s.x, true)
	if err != nil {
		return 0, err
	}
	l, err := s.loss.Forward(logits, s.labels)
	if err != nil {
		return 0, err
	}
	d, err := s.loss.Backward()
	if err != nil {
		return 0, err
	}
	if err := s.model.Backward(d); err != nil {
		return 0, err
	}
	s.opt.Step()
	return l, nil
}

func measure(cfg config) (*result, error) {
	model, err := nn.NewResNet20(nn.ResNetConfig{NumClasses: cfg.Classes, Seed: cfg.Seed, Threads: cfg.Threads})
	if err != nil {
		return nil, fmt.Errorf("build model: %w", err)
	}
	defer model.Close()
	opt, err := optim.NewMomentum(model.TrainableParams(), optim.MomentumConfig{LearningRates: []float32{0.01}, Momentum: 0.9})
	if err != nil {
		return nil, fmt.Errorf("build optimizer: %w", err)
	}
	x, labels, err := randomBatch(cfg)
	if err != nil {
		return nil, err
	}
	step := &trainStep{model: model, loss: nn.NewSoftmaxCrossEntropyExpand(), opt: opt, x: x, labels: labels}
	res := &result{
		Side: "mspipe", Model: model.Name(), Threads: cfg.Threads, GOMAXPROCS: runtime.GOMAXPROCS(0),
		Batch: cfg.Batch, ImageSize: cfg.Size, Warmup: cfg.Warmup, Steps: cfg.Steps,
		ParamsTrainable: len(model.Grads()), ParamsTotal: len(model.Values()), GoVersion: runtime.Version(),
	}
	for i := 0; i < cfg.Warmup; i++ {
		l, err := step.run()
		if err != nil {
			return nil, fmt.Errorf("warm-up step %d: %w", i, err)
		}
		if i == 0 {
			res.FirstLoss = l
		}
	}
	times := make([]float64, cfg.Steps)
	stop, err := startProfile(cfg.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stop() // a failed step still stops the profile; the result is reported below
	faults := minorFaults()
	start := time.Now()
	for i := range times {
		t0 := time.Now()
		l, err := step.run()
		if err != nil {
			return nil, fmt.Errorf("timed step %d: %w", i, err)
		}
		times[i] = time.Since(t0).Seconds()
		if i == 0 && cfg.Warmup == 0 {
			res.FirstLoss = l
		}
		res.LastLoss = l
	}
	res.Seconds = time.Since(start).Seconds()
	if err := stop(); err != nil {
		return nil, err
	}
	res.PageFaultsPerStep = -1
	if end := minorFaults(); faults >= 0 && end >= 0 {
		res.PageFaultsPerStep = float64(end-faults) / float64(cfg.Steps)
	}
	res.ImagesPerSec = float64(cfg.Batch*cfg.Steps) / res.Seconds
	slices.Sort(times)
	res.MedianStepIPS = float64(cfg.Batch) / median(times)
	res.BestStepIPS = float64(cfg.Batch) / times[0]
	return res, nil
}

// startProfile starts a CPU profile into path (nothing when path is empty);
// the returned function stops it and writes the file atomically.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, fmt.Errorf("start cpu profile %s: %w", path, err)
	}
	stopped := false
	return func() error {
		if stopped {
			return nil
		}
		stopped = true
		pprof.StopCPUProfile()
		if err := atomicfile.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write cpu profile %s: %w", path, err)
		}
		return nil
	}, nil
}

// median of sorted, non-empty values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// randomBatch returns standard normal images [Batch 3 Size Size] and uniform
// labels, as the PyTorch side's torch.randn and torch.randint.
func randomBatch(cfg config) (*tensor.Tensor, []int32, error) {
	x, err := tensor.New(cfg.Batch, 3, cfg.Size, cfg.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("batch of %d images %d×%d: %w", cfg.Batch, cfg.Size, cfg.Size, err)
	}
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	for i := range x.Data() {
		x.Data()[i] = float32(r.NormFloat64())
	}
	labels := make([]int32, cfg.Batch)
	for i := range labels {
		labels[i] = int32(r.IntN(cfg.Classes))
	}
	return x, labels, nil
}
