package shard

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// TestDatasetSliceEqualsStandAlone trains with MindSpore's dataset_strategy
// tuple: every rank receives a window of each image (cut along H, W or
// both), the leading operators run on those windows with the convolutions
// and poolings exchanging their halos, and ResNet-20's stem BatchNorm sums
// its statistics over the pieces of each image. Every parameter and the
// moving statistics agree with stand_alone on the same global batches
// within float32 rounding (the CNN after 10 steps, ResNet-20 after 3: see
// below), and all replicas of a slice are bit-identical.
func TestDatasetSliceEqualsStandAlone(t *testing.T) {
	for _, model := range []string{"cnn", "resnet20"} {
		// Training ResNet-20 on batches of 8, a rounding difference jumps
		// between steps 3 and 5 (measured: 8e-7 after 3 steps, 2e-3 on
		// conv1.weight after 10, at every rate and data tried), as ReLU
		// decisions flip once the parameters differ; with the parameters
		// held still the same 10 steps agree to 5e-7
		// (TestDatasetSliceResNetGradients). So 3 training steps here.
		steps := 10
		if model == "resnet20" {
			steps = 3
		}
		global := 8
		xs, ys := batches(steps, global, 21)
		base := Config{Model: model, Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 4, Threads: 1}
		lr := float32(testLR)
		if model == "resnet20" {
			lr /= 10
		}
		alone := trainRanksAt(t, lr, base, nil, xs, ys)
		checkMoved(t, alone.gathered, initial(t, model, 4))
		for _, tc := range []struct {
			devices  int
			splits   [][]int
			strategy parallel.Strategy
		}{
			{2, [][]int{{1, 1, 2, 1}, {1}}, nil},
			{4, [][]int{{1, 1, 1, 4}, {1}}, nil},
			{8, [][]int{{1, 1, 2, 2}, {1}}, nil}, // 4 windows, each on 2 ranks
			{8, [][]int{{2, 1, 2, 2}, {2}}, nil}, // and the batch in two
			{4, [][]int{{1, 1, 4, 1}, {1}}, parallel.Strategy{"conv1": {{1, 1, 4, 1}, {1, 1, 1, 1}}}},
		} {
			if model == "resnet20" && tc.splits[0][0] > 1 {
				// A batch split normalises each rank's rows with their own
				// statistics (data-parallel BatchNorm), not stand_alone's.
				continue
			}
			t.Run(fmt.Sprintf("%s %d ranks %v", model, tc.devices, tc.splits), func(t *testing.T) {
				cfg := base
				cfg.Mode, cfg.Devices, cfg.DatasetStrategy, cfg.Strategy = parallel.SemiAutoParallel, tc.devices, tc.splits, tc.strategy
				if model == "resnet20" {
					// The residual blocks run whole on every rank: split
					// along the batch (their default) each would normalise
					// half a batch, data-parallel BatchNorm.
					cfg.Strategy = wholeBlocks(t, model, global)
				}
				cfg.BatchPerDevice = global / tc.splits[0][0]
				res := trainRanksAt(t, lr, cfg, memComms(tc.devices), xs, ys)
				t.Logf("largest relative difference %.3g", compare(t, res.gathered, alone.gathered, 2e-5))
				checkReplicas(t, res)
				for r := range tc.devices {
					if got, want := res.losses[r], alone.losses[0]; relDiff(got, want) > 1e-5 {
						t.Errorf("rank %d losses %v, stand_alone %v", r, got, want)
					}
				}
				ol := res.nets[0].OpLayouts()[0]
				if got := spatialAxes(ol.Inputs[0]); len(got) == 0 {
					t.Errorf("conv1 runs on %v, not on the windows", ol.Inputs[0])
				}
				if c, h, w := res.nets[0].window(); c*h*w*volume(tc.splits[0][1:]) != imageChannels*imageSide*imageSide {
					t.Errorf("rank 0 receives windows %dx%dx%d of %v", c, h, w, tc.splits[0])
				}
			})
		}
	}
}

// TestHaloBox checks the input box and padding a rank computes its output
// rows from, for MindSpore's "same" 3×3 convolution (stride 1 and 2) and
// a 2×2 pooling whose windows never cross a cut.
func TestHaloBox(t *testing.T) {
	for _, tc := range []struct {
		kernel, stride, size int
		inOff, inLen         int
		outOff, outLen       int
		wantOff, wantLen     int
		before, after        int
		valid                bool
	}{
		{3, 1, 32, 0, 16, 0, 16, 0, 17, 1, 0, false},
		{3, 1, 32, 16, 16, 16, 16, 15, 17, 0, 1, false},
		{3, 1, 32, 8, 8, 8, 8, 7, 10, 0, 0, false},
		{3, 2, 32, 0, 16, 0, 8, 0, 17, 0, 0, false},   // output row 7 reads row 16
		{3, 2, 32, 16, 16, 8, 8, 16, 16, 0, 1, false}, // needs rows 16..32, 32 is padding
		{2, 2, 32, 16, 16, 8, 8, 16, 16, 0, 0, true},
	} {
		pad := tensor.Padding{Mode: tensor.PadSame}
		if tc.valid {
			pad.Mode = tensor.PadValid
		}
		g, err := tensor.NewConvGeom(1, tc.size, tc.size, tc.kernel, tc.kernel, tc.stride, tc.stride, pad)
		if err != nil {
			t.Fatal(err)
		}
		in := parallel.Box{Offset: []int{0, 0, tc.inOff, 0}, Shape: []int{1, 1, tc.inLen, tc.size}}
		out := parallel.Box{Offset: []int{0, 0, tc.outOff, 0}, Shape: []int{1, 1, tc.outLen, g.OutW}}
		box, p := haloBox(g, in, out)
		if box.Offset[2] != tc.wantOff || box.Shape[2] != tc.wantLen || p.Top != tc.before || p.Bottom != tc.after {
			t.Errorf("kernel %d stride %d rows %d+%d → out %d+%d: box rows %d+%d pad %d,%d; want %d+%d pad %d,%d",
				tc.kernel, tc.stride, tc.inOff, tc.inLen, tc.outOff, tc.outLen, box.Offset[2], box.Shape[2], p.Top, p.Bottom,
				tc.wantOff, tc.wantLen, tc.before, tc.after)
		}
		if !slices.Equal(box.Shape[3:], []int{tc.size}) || p.Left != g.PadLeft || p.Right != g.PadRight {
			t.Errorf("uncut columns: box %v pad %d,%d, want all %d columns with the op's padding %d,%d", box, p.Left, p.Right, tc.size, g.PadLeft, g.PadRight)
		}
	}
}

// wholeBlocks is a strategy that runs every residual block of model
// unsplit.
func wholeBlocks(t *testing.T, model string, global int) parallel.Strategy {
	t.Helper()
	g, err := GraphOf(model, global)
	if err != nil {
		t.Fatal(err)
	}
	s := parallel.Strategy{}
	for _, o := range g.Ops {
		if o.Kind == parallel.OpBlock {
			s[o.Name] = [][]int{{1, 1, 1, 1}}
		}
	}
	return s
}

// TestDatasetSliceResNetGradients holds ResNet-20's parameters still and
// runs 10 steps on 10 batches with its images cut along H (2 ranks) and
// along H and W (4 ranks): every step's loss, the last step's gradients
// and the moving statistics after 10 steps (which the stem BatchNorm's
// whole-image statistics feed) agree with stand_alone's within float32
// rounding. Without training the comparison is free of the ReLU decisions
// that rounding flips once parameters move apart.
func TestDatasetSliceResNetGradients(t *testing.T) {
	const global, steps = 8, 10
	xs, ys := batches(steps, global, 31)
	base := Config{Model: "resnet20", Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 6, Threads: 1}
	alone := stillSteps(t, base, nil, xs, ys)
	for _, tc := range []struct {
		devices int
		splits  [][]int
	}{
		{2, [][]int{{1, 1, 2, 1}, {1}}},
		{4, [][]int{{1, 1, 2, 2}, {1}}},
	} {
		t.Run(fmt.Sprint(tc.devices, " ranks ", tc.splits), func(t *testing.T) {
			cfg := base
			cfg.Mode, cfg.Devices, cfg.DatasetStrategy = parallel.SemiAutoParallel, tc.devices, tc.splits
			cfg.Strategy = wholeBlocks(t, "resnet20", global)
			got := stillSteps(t, cfg, memComms(tc.devices), xs, ys)
			if d := relDiff(got.losses, alone.losses); d > 1e-6 {
				t.Errorf("losses %v, stand_alone %v", got.losses, alone.losses)
			}
			t.Logf("gradients and moving statistics: largest relative difference %.3g", compare(t, got.values, alone.values, 1e-5))
		})
	}
}

// still is what stillSteps measured: rank 0's loss per step and, by
// parameter name, the moving statistics and the last step's gradients of
// the trainable parameters.
type still struct {
	losses []float32
	values map[string][]float32
}

// stillSteps runs TrainStep on every batch without updating the
// parameters and gathers the moving statistics and the last gradients on
// rank 0.
func stillSteps(t *testing.T, cfg Config, comms []Comm, xs [][]float32, ys [][]int32) still {
	t.Helper()
	out := still{values: map[string][]float32{}}
	errs := make([]error, cfg.Devices)
	nets := make([]*Net, cfg.Devices)
	done := make(chan int)
	for r := range cfg.Devices {
		go func(r int) {
			defer func() { done <- r }()
			c := cfg
			c.Rank = r
			if comms != nil {
				c.Comm = comms[r]
			}
			net, err := New(c)
			if errs[r] = err; err != nil {
				return
			}
			nets[r] = net
			for step := range xs {
				x, y := rankBatch(c, xs[step], ys[step])
				l, err := net.TrainStep(context.Background(), x, y)
				if errs[r] = err; err != nil {
					return
				}
				if r == 0 {
					out.losses = append(out.losses, l)
				}
			}
			local := map[string][]float32{}
			for _, p := range net.Params() {
				if p.Trainable {
					local[p.Name] = p.Grad.Data()
				} else {
					local[p.Name] = p.Value.Data()
				}
			}
			g, err := net.GatherSlices(context.Background(), 0, local)
			errs[r] = err
			if r == 0 {
				for name, v := range g {
					out.values[name] = v
				}
			}
		}(r)
	}
	for range cfg.Devices {
		<-done
	}
	for _, n := range nets {
		if n != nil {
			n.Close()
		}
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// Under a dataset strategy Predict takes a rank's piece of the images, or
// whole images (the evaluation pipeline's) of which it keeps its piece:
// both give stand_alone's logits for the rank's rows.
func TestDatasetSlicePredict(t *testing.T) {
	const global, d = 8, 4
	xs, ys := batches(1, global, 51)
	alone, err := New(Config{Model: "cnn", Devices: 1, BatchPerDevice: global, Seed: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	whole, _ := rankBatch(Config{Devices: 1}, xs[0], ys[0])
	want, err := alone.Predict(context.Background(), whole)
	if err != nil {
		t.Fatal(err)
	}
	splits := [][]int{{2, 1, 1, 2}, {2}}
	comms := memComms(d)
	errs := make([]error, d)
	done := make(chan struct{})
	for r := range d {
		go func(r int) {
			defer func() { done <- struct{}{} }()
			errs[r] = func() error {
				cfg := Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: d, Rank: r, Comm: comms[r],
					BatchPerDevice: global / 2, DatasetStrategy: splits, Seed: 2, Threads: 1}
				net, err := New(cfg)
				if err != nil {
					return err
				}
				defer net.Close()
				piece, _ := rankBatch(cfg, xs[0], ys[0])
				ds, _ := DatasetShard(splits, d, r)
				first := ds.ShardID * global / 2
				rows, err := tensor.New(global/2, imageChannels, imageSide, imageSide)
				if err != nil {
					return err
				}
				copy(rows.Data(), whole.Data()[first*imageChannels*imageSide*imageSide:])
				for _, x := range []*tensor.Tensor{piece, rows} {
					got, err := net.Predict(context.Background(), x)
					if err != nil {
						return err
					}
					c := DefaultClasses
					if rel := relDiff(got.Data(), want.Data()[first*c:first*c+got.Len()]); rel > 1e-6 || !got.HasShape(global/2, c) {
						return fmt.Errorf("input %v: logits %v differ from one device's rows by %.3g", x.Shape(), got.Shape(), rel)
					}
				}
				return nil
			}()
		}(r)
	}
	for range d {
		<-done
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
