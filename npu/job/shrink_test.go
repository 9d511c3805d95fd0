package job

import (
	"errors"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// ShrinkTo takes the largest device count the rule allows, keeping the
// global batch, and says why it passed over the larger ones.
func TestShrinkTo(t *testing.T) {
	seeds := parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}
	for _, tc := range []struct {
		name               string
		l                  Layout
		survivors          int
		devices, perDevice int
	}{
		{"semi_auto 8, one lost", Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: seeds, BatchSize: 2, Devices: 8}, 7, 4, 4},
		{"semi_auto 8, five lost", Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: seeds, BatchSize: 2, Devices: 8}, 3, 2, 8},
		{"data_parallel 4, one lost", Layout{Model: "cnn", Mode: parallel.DataParallel, BatchSize: 3, Devices: 4}, 3, 2, 6},
		{"data_parallel 2, one lost", Layout{Model: "cnn", Mode: parallel.DataParallel, BatchSize: 3, Devices: 2}, 1, 1, 6},
		{"survivors above the devices", Layout{Model: "cnn", Mode: parallel.DataParallel, BatchSize: 1, Devices: 8}, 12, 4, 2},
		// Pipeline stages are kept: 2 stages of 4 go on as 2 of 2 (6 is
		// no HCCL count), each stage's global batch of 8 kept.
		{"pipeline 2 stages on 8, one lost", Layout{Model: "cnn", Mode: parallel.SemiAutoParallel, BatchSize: 2, Devices: 8, PipelineStages: 2, MicroSize: 4}, 7, 4, 4},
		{"pipeline 4 stages on 8, one lost", Layout{Model: "cnn", Mode: parallel.SemiAutoParallel, BatchSize: 2, Devices: 8, PipelineStages: 4, MicroSize: 2}, 7, 4, 4},
	} {
		got, err := ShrinkTo(tc.l, tc.survivors, nil)
		if err != nil || got.Devices != tc.devices || got.BatchSize != tc.perDevice {
			t.Errorf("%s: %+v, %v; want %d devices of %d", tc.name, got, err, tc.devices, tc.perDevice)
		}
	}
	// The seeds' strategy splits fc.matmul in two: one device cannot run it.
	_, err := ShrinkTo(Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: seeds, BatchSize: 2, Devices: 2}, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "no smaller device count can continue the job (1: with.strategy:") {
		t.Errorf("semi_auto on 2, one lost: %v", err)
	}
	// A pipeline of as many stages as devices cannot keep its stages.
	_, err = ShrinkTo(Layout{Model: "cnn", Mode: parallel.SemiAutoParallel, BatchSize: 2, Devices: 4, PipelineStages: 4}, 3, nil)
	if err == nil || !strings.Contains(err.Error(), "2: 2 devices do not split into the job's 4 pipeline stages (a shrink keeps them)") {
		t.Errorf("4 stages on 4, one lost: %v", err)
	}
	// accept's refusal passes a count over.
	tooFew := errors.New("an epoch would have 3 steps, not 5")
	got, err := ShrinkTo(Layout{Model: "cnn", Mode: parallel.DataParallel, BatchSize: 1, Devices: 8}, 7, func(n, batch int) error {
		if n == 4 {
			return tooFew
		}
		return nil
	})
	if err != nil || got.Devices != 2 || got.BatchSize != 4 {
		t.Errorf("with 4 refused: %+v, %v; want 2 devices of 4", got, err)
	}
	if _, err := ShrinkTo(Layout{Model: "cnn", Mode: parallel.DataParallel, BatchSize: 1, Devices: 2}, 0, nil); err == nil || err.Error() != "no device is left to continue on" {
		t.Errorf("no survivor: %v", err)
	}
}
