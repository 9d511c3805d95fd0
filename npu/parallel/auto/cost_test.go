package auto

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/parallel"
)

// roundMachine has round figures, so expected costs can be worked out by
// hand.
func roundMachine() Machine {
	return Machine{
		FLOPS:            1e12,
		IntraServer:      Link{Bandwidth: 1e10, Latency: 500 * time.Microsecond},
		InterServer:      Link{Bandwidth: 1e9, Latency: 2 * time.Millisecond},
		DevicesPerServer: 8,
		Memory:           1 << 30,
	}
}

func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

func TestAllReduceSeconds(t *testing.T) {
	m := roundMachine()
	// 8 MiB over 4 ranks: each moves 2·3/4 of the buffer.
	if got, want := m.AllReduceSeconds(GroupAllReduce, 8<<20, 4, false), 1.5*8388608/1e10+0.0005; !near(got, want) {
		t.Errorf("within a server: %v s, want %v", got, want)
	}
	if got, want := m.AllReduceSeconds(GroupAllReduce, 8<<20, 4, true), 1.5*8388608/1e9+0.002; !near(got, want) {
		t.Errorf("across servers: %v s, want %v", got, want)
	}
	if got := m.AllReduceSeconds(GroupAllReduce, 8<<20, 1, false); got != 0 {
		t.Errorf("group of one: %v s, want 0", got)
	}

	// Group reductions and exchanges on links of their own within a
	// server, the whole-job AllReduce and the send/receive (no link of
	// its own) on IntraServer; between servers every kind takes the link
	// between servers.
	m.IntraServerByKind = KindLinks{GroupAllReduce: {Bandwidth: 3e8, Latency: 3 * time.Millisecond}, Redistribution: {Bandwidth: 3e8, Latency: 3 * time.Millisecond}}
	for _, tc := range []struct {
		kind   Collective
		across bool
		want   float64
	}{
		{WholeAllReduce, false, 1.5*8388608/1e10 + 0.0005},
		{GroupAllReduce, false, 1.5*8388608/3e8 + 0.003},
		{StageSendRecv, false, 1.5*8388608/1e10 + 0.0005},
		{GroupAllReduce, true, 1.5*8388608/1e9 + 0.002},
		{WholeAllReduce, true, 1.5*8388608/1e9 + 0.002},
	} {
		if got := m.AllReduceSeconds(tc.kind, 8<<20, 4, tc.across); !near(got, tc.want) {
			t.Errorf("kind %d across servers %v: %v s, want %v", tc.kind, tc.across, got, tc.want)
		}
	}
	if got, want := m.ExchangeSeconds(1<<20, false), 1048576/3e8+0.003; !near(got, want) {
		t.Errorf("exchange within a server: %v s, want %v", got, want)
	}
	if got, want := m.ExchangeSeconds(1<<20, true), 1048576/1e9+0.002; !near(got, want) {
		t.Errorf("exchange between servers: %v s, want %v", got, want)
	}
	if got := m.ExchangeSeconds(0, true); got != 0 {
		t.Errorf("empty exchange: %v s, want 0", got)
	}
}

func TestStreamSeconds(t *testing.T) {
	m := roundMachine()
	if got := m.StreamSeconds(1 << 30); got != 0 {
		t.Errorf("no memory bandwidth: %v s, want 0 (not priced)", got)
	}
	m.MemoryBandwidth = 2e10
	if got, want := m.StreamSeconds(1<<30), 1073741824/2e10; !near(got, want) {
		t.Errorf("1 GiB at 20 GB/s: %v s, want %v", got, want)
	}
}

// TestEvaluateMemoryTraffic prices the seeds' network on a machine whose
// memory is slow enough that the products are memory-bound, with the
// whole-job gradient AllReduce on the server's link and group reductions
// and exchanges on slower links of their own.
func TestEvaluateMemoryTraffic(t *testing.T) {
	m := roundMachine()
	m.MemoryBandwidth = 1e9
	m.IntraServerByKind = KindLinks{GroupAllReduce: {Bandwidth: 3e8, Latency: 3 * time.Millisecond}, Redistribution: {Bandwidth: 3e8, Latency: 3 * time.Millisecond}}
	g := seedsNet(32)
	const weight = 512 * 128 * 4
	p, err := Evaluate(g, nil, 4, m)
	if err != nil {
		t.Fatal(err)
	}
	fc, red := p.Ops[0], p.Ops[1]
	// Three passes over the 8×512 input, the weight and the 8×128
	// output; then the update (20 bytes an element) and the packing of
	// the reduced gradient (24 bytes an element).
	traffic := 3.0 * (8*512*4 + weight + 8*128*4)
	elems := 512 * 128.0
	if want := (traffic + 20*elems + 24*elems) / 1e9; !near(fc.ComputeSeconds, want) {
		t.Errorf("matmul compute %v s, want %v", fc.ComputeSeconds, want)
	}
	// The input gradient reads the weight transposed, at its own rate.
	m.TransposedBandwidth = 2.5e8
	if p, err := Evaluate(g, nil, 4, m); err != nil {
		t.Fatal(err)
	} else if want := (2*traffic/3+8*512*4+8*128*4+20*elems+24*elems)/1e9 + weight/2.5e8; !near(p.Ops[0].ComputeSeconds, want) {
		t.Errorf("matmul compute with the weight read transposed at 250 MB/s: %v s, want %v", p.Ops[0].ComputeSeconds, want)
	}
	// And the weight gradient is written at its own rate too.
	m.WeightGradBandwidth = 5e8
	if p, err := Evaluate(g, nil, 4, m); err != nil {
		t.Fatal(err)
	} else if want := (traffic/3+2*(8*512*4+8*128*4)+20*elems+24*elems)/1e9 + weight/2.5e8 + weight/5e8; !near(p.Ops[0].ComputeSeconds, want) {
		t.Errorf("matmul compute with the weight gradient written at 500 MB/s: %v s, want %v", p.Ops[0].ComputeSeconds, want)
	}
	m.TransposedBandwidth, m.WeightGradBandwidth = 0, 0
	// The gradient spans every rank: the whole-job AllReduce's link.
	if want := 1.5*weight/1e10 + 0.0005; !near(fc.CommSeconds, want) {
		t.Errorf("matmul comm %v s, want %v (shared memory)", fc.CommSeconds, want)
	}
	// ReduceSum: two passes over its 8×128 input and 8 outputs.
	if want := 2.0 * (8*128*4 + 8*4) / 1e9; !near(red.ComputeSeconds, want) {
		t.Errorf("reduce compute %v s, want %v", red.ComputeSeconds, want)
	}

	// Column split: the redistribution to ReduceSum's batch split goes
	// on its own slow link, and the FLOPs still lose to the traffic.
	p, err = Evaluate(g, parallel.Strategy{"fc.matmul": {{1, 1}, {1, 4}}}, 4, m)
	if err != nil {
		t.Fatal(err)
	}
	red = p.Ops[1]
	// Forward a rank fetches 3 of the 4 column blocks of its 8 rows,
	// backward 3 of the 4 row blocks of its 32 columns.
	if want := (3*8*32*4+3*8*32*4)/3e8 + 2*0.003; !near(red.CommSeconds, want) {
		t.Errorf("reduce comm %v s, want %v (the exchange link)", red.CommSeconds, want)
	}
}

// The engine reduces the gradients of one partition of the ranks in one
// bucket a step: the second operator reducing over the same groups pays
// bytes but no second latency.
func TestBucketLatencyOncePerGroup(t *testing.T) {
	m := roundMachine()
	g := parallel.Graph{Model: "two", Ops: []parallel.OpSpec{matmul("a", 32, 64, 64), matmul("b", 32, 64, 64)}}
	p, err := Evaluate(g, nil, 4, m)
	if err != nil {
		t.Fatal(err)
	}
	grad := 1.5 * 64 * 64 * 4 / 1e10
	if a, b := p.Ops[0], p.Ops[1]; !near(a.CommSeconds, grad+0.0005) || !near(b.CommSeconds, grad) || a.Collectives != 1 || b.Collectives != 0 {
		t.Errorf("comm %v s in %d calls and %v s in %d, want %v in 1 and %v in 0", a.CommSeconds, a.Collectives, b.CommSeconds, b.Collectives, grad+0.0005, grad)
	}
}

func layout(t *testing.T, shape, shard []int, devices int) parallel.Layout {
	t.Helper()
	l, err := parallel.SplitLayout(shape, shard, devices)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRedistribution(t *testing.T) {
	m := roundMachine()
	shape := []int{32, 128}
	rows := layout(t, shape, []int{4, 1}, 4)
	whole := layout(t, shape, []int{1, 1}, 4)
	cols := layout(t, shape, []int{1, 4}, 4)
	for _, tc := range []struct {
		name     string
		from, to parallel.Layout
		each     int64 // bytes every rank receives
	}{
		// AllGather: the three row blocks of 8×128 a rank lacks.
		{"batch split to replicated", rows, whole, 3 * 8 * 128 * 4},
		// Split: every rank already holds its part.
		{"replicated to batch split", whole, rows, 0},
		// AllToAll: of its 32×32 column block a rank holds 8 rows.
		{"rows to columns", rows, cols, 24 * 32 * 4},
		{"unchanged", rows, rows, 0},
	} {
		tr, err := m.Redistribution(tc.from, tc.to)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for r := range 4 {
			if tr.Intra[r] != tc.each || tr.Inter[r] != 0 {
				t.Errorf("%s: rank %d receives %d within its server and %d from others, want %d and 0", tc.name, r, tr.Intra[r], tr.Inter[r], tc.each)
			}
		}
		want := 0.0
		if tc.each > 0 {
			want = float64(tc.each)/1e10 + 0.0005
		}
		if got := tr.Seconds(m); !near(got, want) {
			t.Errorf("%s: %v s, want %v", tc.name, got, want)
		}
	}

	// Two servers of 4: gathering 8 row blocks of 4×128 brings 3 from the
	// rank's own server and 4 from the other.
	m.DevicesPerServer = 4
	tr, err := m.Redistribution(layout(t, shape, []int{8, 1}, 8), layout(t, shape, []int{1, 1}, 8))
	if err != nil {
		t.Fatal(err)
	}
	block := int64(4 * 128 * 4)
	for r := range 8 {
		if tr.Intra[r] != 3*block || tr.Inter[r] != 4*block {
			t.Errorf("rank %d receives %d and %d, want %d within its server and %d from the other", r, tr.Intra[r], tr.Inter[r], 3*block, 4*block)
		}
	}
	if got, want := tr.Seconds(m), float64(3*block)/1e10+float64(4*block)/1e9+0.002; !near(got, want) {
		t.Errorf("across servers: %v s, want %v", got, want)
	}

	if _, err := m.Redistribution(rows, layout(t, []int{32, 64}, []int{4, 1}, 4)); !errors.Is(err, ErrGraph) {
		t.Errorf("different shapes: %v", err)
	}
}

// TestEvaluateSeedsNet prices the seeds' network by hand: x[32,512]·w[512,128]
// then ReduceSum, on 4 devices of one server.
func TestEvaluateSeedsNet(t *testing.T) {
	m := roundMachine()
	g := seedsNet(32)
	const matmulFLOPs = 2 * 32 * 512 * 128
	weight := 512 * 128 * 4.0

	t.Run("data parallel", func(t *testing.T) {
		p, err := Evaluate(g, nil, 4, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatStrategy(p.Strategy["fc.matmul"]); got != "[[4, 1], [1, 1]]" {
			t.Errorf("data parallel strategy %s", got)
		}
		fc, red := p.Ops[0], p.Ops[1]
		// Forward, input gradient and weight gradient over 4 devices.
		if want := 3.0 * matmulFLOPs / 4 / 1e12; !near(fc.ComputeSeconds, want) {
			t.Errorf("matmul compute %v s, want %v", fc.ComputeSeconds, want)
		}
		// The weight gradient is all-reduced over the 4 devices.
		if want := 1.5*weight/1e10 + 0.0005; !near(fc.CommSeconds, want) || fc.Collectives != 1 || fc.CommBytes != int64(1.5*weight) {
			t.Errorf("matmul comm %v s %d bytes %d calls, want %v s", fc.CommSeconds, fc.CommBytes, fc.Collectives, want)
		}
		// Weight, its gradient, momentum and reduction buffer; the 8×128
		// output; the 8×512 batch.
		if want := int64(4*weight + 8*128*4 + 8*512*4); fc.Memory != want {
			t.Errorf("matmul memory %d, want %d", fc.Memory, want)
		}
		if want := 2.0 * 32 * 128 / 4 / 1e12; !near(red.ComputeSeconds, want) || red.CommSeconds != 0 || red.Memory != 8*4 {
			t.Errorf("reduce: compute %v s (want %v), comm %v s, memory %d", red.ComputeSeconds, want, red.CommSeconds, red.Memory)
		}
		if !near(p.StepSeconds, fc.ComputeSeconds+fc.CommSeconds+red.ComputeSeconds) || p.PeakMemory != fc.Memory+red.Memory {
			t.Errorf("totals %v s %d bytes", p.StepSeconds, p.PeakMemory)
		}
	})

	t.Run("seeds strategy", func(t *testing.T) {
		p, err := Evaluate(g, parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, 4, m)
		if err != nil {
			t.Fatal(err)
		}
		fc, red := p.Ops[0], p.Ops[1]
		// Two devices split the columns; two repeat: no gradient reduction.
		// Every rank needs all 32 rows of the batch and the loader gave it
		// 8: it fetches the other 24 rows of 512 in one Exchange.
		if want := 3.0 * matmulFLOPs / 2 / 1e12; !near(fc.ComputeSeconds, want) || fc.Used != 2 {
			t.Errorf("matmul compute %v s (want %v), used %d", fc.ComputeSeconds, want, fc.Used)
		}
		if want := 24*512*4/1e10 + 0.0005; !near(fc.CommSeconds, want) || fc.Collectives != 1 || fc.CommBytes != 24*512*4 {
			t.Errorf("matmul comm %v s in %d calls, %d bytes, want %v s in 1, %d bytes (the batch gathered)", fc.CommSeconds, fc.Collectives, fc.CommBytes, want, 24*512*4)
		}
		if want := int64(3*weight/2 + 32*64*4 + 32*512*4); fc.Memory != want {
			t.Errorf("matmul memory %d, want %d", fc.Memory, want)
		}
		// ReduceSum runs data parallel: forward, a rank holding 64 of
		// the 128 columns fetches the other half of its 8 rows (8×64);
		// backward, it fetches the 24×64 rows of its columns it lacks.
		if want := (8*64*4+24*64*4)/1e10 + 2*0.0005; !near(red.CommSeconds, want) || red.Collectives != 2 {
			t.Errorf("reduce comm %v s in %d calls, want %v s in 2", red.CommSeconds, red.Collectives, want)
		}
	})

	t.Run("contraction split", func(t *testing.T) {
		p, err := Evaluate(g, parallel.Strategy{"fc.matmul": {{1, 4}, {4, 1}}}, 4, m)
		if err != nil {
			t.Fatal(err)
		}
		// Each rank sums a quarter of k: the 32×128 output is all-reduced;
		// of its 32 rows of 128 columns of the batch it has 8 from the
		// loader.
		if want := 1.5*32*128*4/1e10 + 0.0005 + 24*128*4/1e10 + 0.0005; !near(p.Ops[0].CommSeconds, want) {
			t.Errorf("partial output comm %v s, want %v", p.Ops[0].CommSeconds, want)
		}
	})
}

func TestEvaluateRefusals(t *testing.T) {
	m := roundMachine()
	if _, err := Evaluate(seedsNet(32), parallel.Strategy{"fc.matmul": {{1, 1}, {1, 3}}}, 4, m); !errors.Is(err, parallel.ErrStrategy) {
		t.Errorf("bad strategy: %v", err)
	}
	broken := seedsNet(32)
	broken.Ops[1] = reduceSum("reduce", 16, 128)
	if _, err := Evaluate(broken, nil, 4, m); !errors.Is(err, ErrGraph) {
		t.Errorf("mismatched chain: %v", err)
	}
	m.FLOPS = 0
	if _, err := Evaluate(seedsNet(32), nil, 4, m); !errors.Is(err, ErrMachine) {
		t.Errorf("no FLOP/s: %v", err)
	}
}

// A parameter two operators use is counted once, at its first user.
func TestSharedParameterCountedOnce(t *testing.T) {
	a, b := matmul("a", 32, 64, 64), matmul("b", 32, 64, 64)
	b.Inputs[1].Name = "a.weight"
	g := parallel.Graph{Model: "tied", Ops: []parallel.OpSpec{a, b}}
	p, err := Evaluate(g, nil, 2, roundMachine())
	if err != nil {
		t.Fatal(err)
	}
	// Value, gradient, momentum and the buffer its gradient is reduced in.
	if p.Ops[0].ParamMemory != 4*64*64*4 || p.Ops[1].ParamMemory != 0 {
		t.Errorf("parameter memory %d and %d, want %d and 0", p.Ops[0].ParamMemory, p.Ops[1].ParamMemory, 4*64*64*4)
	}
	for _, st := range Candidates(b, 4, sharedParams(g)) {
		if !slices.Equal(st[1], []int{1, 1}) {
			t.Errorf("candidate %v splits the shared weight", st)
		}
	}
}

// The loader gives each rank its rows of the batch; a loss that runs on
// more rows than that fetches their labels, a float32 a row.
func TestLossGathersLabels(t *testing.T) {
	m := roundMachine()
	g := parallel.Graph{Model: "head", Ops: []parallel.OpSpec{matmul("fc", 32, 64, 10), loss(32, 10)}}
	p, err := Evaluate(g, parallel.Strategy{"loss": {{1, 1}, {1}}}, 4, m)
	if err != nil {
		t.Fatal(err)
	}
	l := p.Ops[1]
	// Labels: 24 rows fetched. Logits: forward the 24 rows of 10 the
	// rank lacks; backward nothing (its gradient rows are its own).
	want := 24*4/1e10 + 0.0005 + 24*10*4/1e10 + 0.0005
	if !near(l.CommSeconds, want) || l.Collectives != 2 {
		t.Errorf("loss comm %v s in %d calls, want %v s in 2", l.CommSeconds, l.Collectives, want)
	}
	dp, err := Evaluate(g, nil, 4, m)
	if err != nil {
		t.Fatal(err)
	}
	if c := dp.Ops[1]; c.Collectives != 1 || c.CommBytes != 6 {
		t.Errorf("data-parallel loss: %d calls, %d bytes, want 1 and 6 (the loss's sum, no labels fetched)", c.Collectives, c.CommBytes)
	}
}

// bnGraph is one BatchNorm over [8 16 4 4] with MindSpore's four
// parameters, the moving statistics frozen when frozen is set.
func bnGraph(frozen bool) parallel.Graph {
	bn := elementwise("bn", parallel.OpBatchNorm, []int{8, 16, 4, 4}, "nchw")
	bn.Splittable = "nc"
	for _, p := range []struct {
		suffix string
		frozen bool
	}{{".moving_mean", frozen}, {".moving_variance", frozen}, {".gamma", false}, {".beta", false}} {
		bn.Extra = append(bn.Extra, parallel.TensorSpec{Name: "bn" + p.suffix, Shape: []int{16}, Labels: "c", Frozen: p.frozen})
	}
	return parallel.Graph{Model: "bn", Ops: []parallel.OpSpec{bn}}
}

// A frozen parameter (BatchNorm's moving statistics) is priced as
// npu/shard holds it: its value, and its room in the bucket that averages
// it over the ranks, but no gradient, no moment and no update, and the
// parallel optimizer leaves it whole; the reduce-scatters share one
// receive buffer.
func TestFrozenParamsPricedAsHeld(t *testing.T) {
	m := roundMachine()
	m.MemoryBandwidth = 1e9
	price := func(frozen bool) (op, whole OpCost) {
		t.Helper()
		g := bnGraph(frozen)
		p, err := newPricer(g, 4, m)
		if err != nil {
			t.Fatal(err)
		}
		ParallelOptimizer(0)(p)
		ols, err := g.Shard(nil, 4)
		if err != nil {
			t.Fatal(err)
		}
		if op, err = p.op(0, ols[0]); err != nil {
			t.Fatal(err)
		}
		plan, err := Evaluate(g, nil, 4, m, ParallelOptimizer(0))
		if err != nil {
			t.Fatal(err)
		}
		return op, plan.Ops[0]
	}
	// Data parallel on 4 ranks: every [16] parameter (64 bytes) is
	// repeated 4 times and reduced over the 4. gamma and beta: value,
	// gradient, a quarter of the moment and the other 3 ranks' parts of
	// the gradient's quarter (reduce-scatter), 64+64+16+48 bytes each.
	// The moving statistics: value and bucket room, 64+64 each.
	op, whole := price(true)
	if want := int64(2*(64+64+16+48) + 2*(64+64)); op.ParamMemory != want {
		t.Errorf("frozen moving statistics: parameter memory %d bytes, want %d", op.ParamMemory, want)
	}
	// The plan keeps one reduce-scatter buffer of 48 bytes, not two.
	if want := op.ParamMemory - 48; whole.ParamMemory != want || whole.Memory != want+whole.ActivationMemory {
		t.Errorf("plan: parameter memory %d bytes, memory %d; want %d and %d", whole.ParamMemory, whole.Memory, want, want+whole.ActivationMemory)
	}
	// Were they trainable, they would be split and priced like gamma.
	hot, _ := price(false)
	if want := int64(4 * (64 + 64 + 16 + 48)); hot.ParamMemory != want {
		t.Errorf("trainable moving statistics: parameter memory %d bytes, want %d", hot.ParamMemory, want)
	}
	// The update of a quarter of each (4 elements, 20 bytes an element)
	// is what the frozen ones do not cost; both are packed for the
	// reduction alike.
	if want := 2 * 4 * float64(UpdateBytesPerElement) / 1e9; !near(hot.ComputeSeconds-op.ComputeSeconds, want) {
		t.Errorf("compute %v s frozen, %v s trainable: differ by %v s, want %v", op.ComputeSeconds, hot.ComputeSeconds, hot.ComputeSeconds-op.ComputeSeconds, want)
	}
}

// A layout npu/shard refuses under optimizer_weight_shard_size (a weight
// repeated on 3 ranks, cut into pieces of 2) is an error for Evaluate and
// no candidate for the search.
func TestOptimizerShardRefusedLayouts(t *testing.T) {
	g := parallel.Graph{Model: "fc", Ops: []parallel.OpSpec{matmul("fc", 12, 8, 6), loss(12, 6)}}
	m := roundMachine()
	refused := parallel.Strategy{"fc": {{3, 2}, {2, 1}}} // weight split 2 ways: repeated on 3 of 6
	if _, err := Evaluate(g, refused, 6, m, ParallelOptimizer(2)); !errors.Is(err, parallel.ErrOptimizerShard) || !strings.Contains(err.Error(), "fc.weight is repeated on 3 ranks") {
		t.Fatalf("evaluate %v with shard size 2: %v", refused, err)
	}
	if _, err := Evaluate(g, refused, 6, m); err != nil {
		t.Fatalf("evaluate %v without the parallel optimizer: %v", refused, err)
	}
	plan, err := Search(g, 6, m, ParallelOptimizer(2))
	if err != nil {
		t.Fatal(err)
	}
	w := plan.Strategy["fc"][1]
	if w[0]*w[1] == 2 {
		t.Errorf("search chose %v, which npu/shard refuses with shard size 2", plan.Strategy["fc"])
	}
	if _, err := Evaluate(g, plan.Strategy, 6, m, ParallelOptimizer(2)); err != nil {
		t.Errorf("the searched strategy %v: %v", plan.Strategy, err)
	}
}
