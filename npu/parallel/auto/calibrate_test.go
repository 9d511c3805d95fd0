package auto

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestMeasure(t *testing.T) {
	for name, f := range map[string]func(context.Context, time.Duration) (float64, error){
		"FLOPS": MeasureFLOPS, "memory bandwidth": MeasureMemoryBandwidth, "transposed bandwidth": MeasureTransposedBandwidth,
		"weight-gradient bandwidth": MeasureWeightGradBandwidth,
	} {
		rate, err := f(context.Background(), 20*time.Millisecond)
		if err != nil || !(rate > 0) || math.IsInf(rate, 0) {
			t.Fatalf("%s: %v a second, %v", name, rate, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := f(ctx, time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled: %v", name, err)
		}
	}
}
