package auto

import (
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

func TestPlanFormat(t *testing.T) {
	p, err := Evaluate(seedsNet(32), parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, 4, roundMachine())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := p.Format(&b); err != nil {
		t.Fatal(err)
	}
	// Figures worked out in TestEvaluateSeedsNet: 3·2·32·512·128 FLOPs over
	// 2 devices at 1 TFLOP/s; 48 KiB of the batch gathered and a latency
	// for the MatMul; 8 KiB moved and two latencies for ReduceSum; 3·128 KiB
	// of weight slices, a 32×64 output and the 32×512 batch.
	want := `operator   kind       strategy          devices used  compute  comm     memory
fc.matmul  MatMul     [[1, 1], [1, 2]]  2             6.29 µs  505 µs   456.0 KiB
reduce     ReduceSum  [[4, 1]]          4             2.05 ns  1.00 ms  32 B
semi_auto_parallel_net on 4 devices: predicted step 1.51 ms (compute 6.29 µs, communication 1.51 ms); predicted peak memory 456.0 KiB per rank (the cost model's parameters and activations), fits the device's 1 GiB
communication per rank and step: 56.0 KiB within a server (10.0 GB/s links), 0 B between servers (1.00 GB/s links), 8 devices a server
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	// Kinds with a link of their own within a server are named with it.
	m := roundMachine()
	m.IntraServerByKind[Redistribution] = Link{Bandwidth: 5e8}
	m.IntraServerByKind[GroupAllReduce] = Link{Bandwidth: 9e8}
	if p, err = Evaluate(seedsNet(32), nil, 4, m); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := p.Format(&b); err != nil {
		t.Fatal(err)
	}
	if line := "(10.0 GB/s links; GroupAllReduce 900 MB/s; Exchange 500 MB/s), "; !strings.Contains(b.String(), line) {
		t.Errorf("got\n%s\nwant a line with %q", b.String(), line)
	}
}

func TestFormatStrategy(t *testing.T) {
	for _, tc := range []struct {
		s    [][]int
		want string
	}{{[][]int{{1, 1}, {1, 2}}, "[[1, 1], [1, 2]]"}, {[][]int{{8}}, "[[8]]"}, {nil, "[]"}} {
		if got := FormatStrategy(tc.s); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.s, got, tc.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for in, want := range map[float64]string{
		0: "0", 438e-6: "438 µs", 6.29e-6: "6.29 µs", 1e-3: "1.00 ms", 12.5e-3: "12.5 ms", 100e-3: "100 ms",
		1: "1.00 s", 250: "250 s", 71.0112: "71.0 s", 999e-9: "999 ns", 1.5e-9: "1.50 ns",
	} {
		if got := seconds(in); got != want {
			t.Errorf("seconds(%g) = %q, want %q", in, got, want)
		}
	}
}
