package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/npu/collective/collectivetest"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
)

// wire makes cfg reduce its gradients through comm; with the shared-memory
// transport the gradients live in the communicator's memory, as in the
// npu/train stage.
func wire(cfg *Config, comm *collective.Comm) {
	cfg.Reduce = func(ctx context.Context, g []float32) error { return comm.AllReduce(ctx, g, collective.Mean) }
	if comm.Transport() == collective.TransportShm {
		cfg.AllocGrads = comm.Alloc
	}
}

func equivalenceConfig(dataDir, ckptDir string, batch int) Config {
	return Config{
		DataDir: dataDir, Model: "cnn", Epochs: 2, BatchSize: batch, LearningRate: 0.01, Seed: 11,
		ShuffleBuffer: -1, NoAugment: true, CkptDir: ckptDir, SaveCheckpointSteps: 1000, Threads: 1,
	}
}

func finalTensors(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	tensors, err := ckpt.Read(filepath.Join(dir, "CKP-2_10.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, tt := range tensors {
		if tt.DType != ckpt.DTypeFloat32 {
			continue
		}
		v, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out[tt.Name] = v
	}
	return out
}

// TestDataParallelEqualsStandAlone trains the BatchNorm-free CNN for 20
// steps over global batch 32: on one device, and data-parallel on 2, 4 and 8
// ranks (batch 32/n each, MindSpore's sharding, gradients averaged by
// AllReduce). Every parameter and momentum agrees within float32 rounding,
// and all ranks hold bit-identical parameters.
func TestDataParallelEqualsStandAlone(t *testing.T) {
	dataDir := tinyData(t, 64) // 320 images: 10 steps of 32 per epoch
	alone := t.TempDir()
	if _, err := Train(context.Background(), equivalenceConfig(dataDir, alone, 32)); err != nil {
		t.Fatal(err)
	}
	want := finalTensors(t, alone)
	var tcpResult map[string][]float32
	for _, tc := range []struct {
		n         int
		transport collective.Transport
	}{{2, collective.TransportTCP}, {4, collective.TransportTCP}, {8, collective.TransportTCP}, {8, collective.TransportShm}} {
		n := tc.n
		t.Run(fmt.Sprintf("%d ranks %v", n, tc.transport), func(t *testing.T) {
			cs := collectivetest.Group(t, n, tc.transport)
			dirs := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				dirs[r] = t.TempDir()
				cfg := equivalenceConfig(dataDir, dirs[r], 32/n)
				cfg.NumShards, cfg.ShardID = n, r
				wire(&cfg, cs[r])
				wg.Add(1)
				go func(r int, cfg Config) {
					defer wg.Done()
					_, errs[r] = Train(context.Background(), cfg)
				}(r, cfg)
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			rank0 := finalTensors(t, dirs[0])
			// Shared memory reduces in the rank order of TCP's Mesh: the
			// same bits.
			if tc.transport == collective.TransportTCP {
				tcpResult = rank0
			} else {
				for name, v := range tcpResult {
					for i := range v {
						if math.Float32bits(v[i]) != math.Float32bits(rank0[name][i]) {
							t.Fatalf("%s[%d]: %v over shared memory, %v over TCP", name, i, rank0[name][i], v[i])
						}
					}
				}
			}
			worstRel := 0.0
			defer func() { t.Logf("largest relative difference from stand_alone: %.3g", worstRel) }()
			for name, w := range want {
				got := rank0[name]
				if len(got) != len(w) {
					t.Fatalf("%s: %d values, want %d", name, len(got), len(w))
				}
				// Relative error of the tensor as a vector: ||got-want|| / ||want||.
				var diff, norm float64
				for i := range w {
					d := float64(got[i]) - float64(w[i])
					diff += d * d
					norm += float64(w[i]) * float64(w[i])
				}
				rel := math.Sqrt(diff) / math.Max(math.Sqrt(norm), 1e-30)
				if rel > 1e-5 {
					t.Errorf("%s: relative difference %.3g > 1e-5", name, rel)
				}
				worstRel = math.Max(worstRel, rel)
			}
			for r := 1; r < n; r++ {
				other := finalTensors(t, dirs[r])
				for name, v := range rank0 {
					for i := range v {
						if math.Float32bits(v[i]) != math.Float32bits(other[name][i]) {
							t.Fatalf("rank %d differs from rank 0 in %s[%d]", r, name, i)
						}
					}
				}
			}
		})
	}
}

// TestDataParallelRunsAreBitIdentical trains the same 4-rank data-parallel
// ResNet-20 job twice and compares every checkpoint byte of every rank.
func TestDataParallelRunsAreBitIdentical(t *testing.T) {
	for _, transport := range []collective.Transport{collective.TransportTCP, collective.TransportShm} {
		t.Run(transport.String(), func(t *testing.T) { testRunsBitIdentical(t, transport) })
	}
}

func testRunsBitIdentical(t *testing.T, transport collective.Transport) {
	dataDir := tinyData(t, 16) // 80 images: 5 steps of 4 per rank and epoch
	const n = 4
	run := func() []map[string][]byte {
		cs := collectivetest.Group(t, n, transport)
		dirs := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := 0; r < n; r++ {
			dirs[r] = t.TempDir()
			cfg := Config{DataDir: dataDir, Epochs: 1, BatchSize: 4, LearningRate: 0.05, Seed: 5, CkptDir: dirs[r],
				SaveCheckpointSteps: 2, NumShards: n, ShardID: r, Threads: 1}
			wire(&cfg, cs[r])
			wg.Add(1)
			go func(r int, cfg Config) {
				defer wg.Done()
				_, errs[r] = Train(context.Background(), cfg)
			}(r, cfg)
		}
		wg.Wait()
		out := make([]map[string][]byte, n)
		for r := range out {
			if errs[r] != nil {
				t.Fatalf("rank %d: %v", r, errs[r])
			}
			out[r] = readAll(t, dirs[r])
		}
		return out
	}
	first, second := run(), run()
	for r := 0; r < n; r++ {
		if len(first[r]) != 3 {
			t.Errorf("rank %d wrote %d checkpoints, want 3 (steps 2, 4 and the end)", r, len(first[r]))
		}
		for name, b := range first[r] {
			if !bytes.Equal(b, second[r][name]) {
				t.Errorf("rank %d: %s differs between two identical runs", r, name)
			}
		}
	}
}

// A device too small for the job fails training with an out-of-memory
// error that names what did not fit; the result reports the peak a job
// that fits used.
func TestDeviceMemoryCap(t *testing.T) {
	dataDir := tinyData(t, 16)
	cfg := Config{DataDir: dataDir, Epochs: 1, BatchSize: 4, LearningRate: 0.05, Seed: 5, Threads: 1, MaxSteps: 2,
		DeviceMemory: 3 << 20}
	_, err := Train(context.Background(), cfg)
	if !errors.Is(err, nn.ErrOutOfMemory) || !strings.Contains(err.Error(), "optimizer moments needs 1.0 MiB") {
		t.Fatalf("3 MiB device: %v, want out of memory for the optimizer moments", err)
	}
	cfg.DeviceMemory = 0
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.DeviceMemory != nn.Ascend910Memory || res.PeakDeviceMemory < 3<<20 || res.PeakDeviceMemory > 64<<20 {
		t.Errorf("peak %d of %d bytes, want an Ascend 910's capacity and a few MiB", res.PeakDeviceMemory, res.DeviceMemory)
	}
}
