package auto

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestMeasureFLOPS(t *testing.T) {
	flops, err := MeasureFLOPS(context.Background(), 20*time.Millisecond)
	if err != nil || !(flops > 0) || math.IsInf(flops, 0) {
		t.Fatalf("%v FLOP/s, %v", flops, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := MeasureFLOPS(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
