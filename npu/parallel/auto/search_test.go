package auto

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/parallel"
)

// simulated is the default machine with the devices sharing this VM's two
// cores, and a memory cap in the range the tests use.
func simulated(devices int, memory int64) Machine {
	m := DefaultMachine().ShareCores(2, devices, 1)
	m.Memory = memory
	return m
}

func TestCandidates(t *testing.T) {
	fc := matmul("fc.matmul", 32, 512, 128)
	got := Candidates(fc, 4, nil)
	// n, k, m split 1, 2 or 4 ways with a product dividing 4.
	if len(got) != 10 {
		t.Errorf("%d candidates on 4 devices, want 10: %v", len(got), got)
	}
	var seeds, dp bool
	for _, st := range got {
		seeds = seeds || FormatStrategy(st) == "[[1, 1], [1, 2]]"
		dp = dp || FormatStrategy(st) == "[[4, 1], [1, 1]]"
	}
	if !seeds || !dp {
		t.Errorf("candidates %v lack the seeds' strategy or data parallel", got)
	}
	// 10 classes cannot be split 4 ways: fc3's m only 1 or 2.
	for _, st := range Candidates(matmul("fc3", 32, 64, 10), 4, nil) {
		if st[1][1] == 4 {
			t.Errorf("candidate %v splits 10 columns 4 ways", st)
		}
	}
}

func TestSearchNeverWorseThanDataParallel(t *testing.T) {
	// The simulated devices share two cores; a cluster's have one each
	// (DefaultMachine), and 16 of them span two servers.
	cluster := func(devices int) Machine {
		m := DefaultMachine()
		m.Memory = 256 << 20
		return m
	}
	for _, g := range []parallel.Graph{seedsNet(32), wideMLP(32, 1024), cnn(32)} {
		for _, tc := range []struct {
			devices int
			machine func(int) Machine
		}{{2, shared256}, {4, shared256}, {8, shared256}, {2, cluster}, {4, cluster}, {8, cluster}, {16, cluster}} {
			devices, m := tc.devices, tc.machine(tc.devices)
			dp, err := Evaluate(g, nil, devices, m)
			if err != nil {
				t.Fatal(err)
			}
			if !dp.Fits() {
				t.Fatalf("%s on %d: data parallel needs %d bytes, over the cap %d: pick a bigger cap", g.Model, devices, dp.PeakMemory, m.Memory)
			}
			plan, err := Search(g, devices, m)
			if err != nil {
				t.Fatalf("%s on %d devices: %v", g.Model, devices, err)
			}
			if plan.StepSeconds > dp.StepSeconds || !plan.Fits() {
				t.Errorf("%s on %d devices: searched %v s, %d bytes; data parallel %v s; cap %d", g.Model, devices, plan.StepSeconds, plan.PeakMemory, dp.StepSeconds, m.Memory)
			}
			// The plan is what Evaluate says of its strategy.
			again, err := Evaluate(g, plan.Strategy, devices, m)
			if err != nil || !near(again.StepSeconds, plan.StepSeconds) || again.PeakMemory != plan.PeakMemory {
				t.Errorf("%s on %d devices: evaluating the plan's strategy gives %+v, %v", g.Model, devices, again, err)
			}
			t.Logf("%s on %d devices with %.3g GFLOP/s each: %d candidates, searched %.3g ms vs data parallel %.3g ms", g.Model, devices, m.FLOPS/1e9, plan.Candidates, plan.StepSeconds*1e3, dp.StepSeconds*1e3)
		}
	}
}

func shared256(devices int) Machine { return simulated(devices, 256<<20) }

// A wide MLP whose data-parallel replica does not fit a device: the search
// splits the big weights.
func TestSearchFitsWideMLP(t *testing.T) {
	g := wideMLP(32, 4096)
	m := simulated(8, 128<<20)
	dp, err := Evaluate(g, nil, 8, m)
	if err != nil {
		t.Fatal(err)
	}
	if dp.Fits() {
		t.Fatalf("data parallel fits (%d bytes): the test needs a model that does not", dp.PeakMemory)
	}
	plan, err := Search(g, 8, m)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Fits() {
		t.Fatalf("searched plan needs %d bytes, cap %d", plan.PeakMemory, m.Memory)
	}
	// fc2's 64 MiB weight (192 MiB with gradient and momentum) must be split.
	if w := plan.Strategy["fc2"][1]; w[0]*w[1] == 1 {
		t.Errorf("fc2 weight kept whole: %v", plan.Strategy["fc2"])
	}
	t.Logf("data parallel %d MiB, searched %d MiB, %.3g ms", dp.PeakMemory>>20, plan.PeakMemory>>20, plan.StepSeconds*1e3)
}

func TestSearchNothingFits(t *testing.T) {
	_, err := Search(wideMLP(32, 4096), 2, simulated(2, 16<<20))
	if !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "largest consumer is operator fc2") || !strings.Contains(err.Error(), "parameter fc2.weight (96.0 MiB)") {
		t.Errorf("error %v", err)
	}
}

// bruteForce evaluates every combination of the operators' candidates and
// returns the fastest plan that fits (nil if none does) and the least
// memory any combination needs.
func bruteForce(t *testing.T, g parallel.Graph, devices int, m Machine) (*Plan, int64) {
	t.Helper()
	whole := sharedParams(g)
	cands := make([][][][]int, len(g.Ops))
	for i, o := range g.Ops {
		cands[i] = Candidates(o, devices, whole)
	}
	var best *Plan
	least := int64(math.MaxInt64)
	pick := make([]int, len(g.Ops))
	for {
		s := parallel.Strategy{}
		for i, o := range g.Ops {
			s[o.Name] = cands[i][pick[i]]
		}
		p, err := Evaluate(g, s, devices, m)
		if err != nil {
			t.Fatal(err)
		}
		least = min(least, p.PeakMemory)
		if p.Fits() && (best == nil || p.StepSeconds < best.StepSeconds) {
			best = p
		}
		i := 0
		for ; i < len(pick); i++ {
			if pick[i]++; pick[i] < len(cands[i]) {
				break
			}
			pick[i] = 0
		}
		if i == len(pick) {
			return best, least
		}
	}
}

func TestSearchEqualsBruteForce(t *testing.T) {
	mlp := parallel.Graph{Model: "mlp", Ops: []parallel.OpSpec{
		matmul("fc1", 16, 256, 512),
		elementwise("relu", parallel.OpReLU, []int{16, 512}, "nm"),
		matmul("fc2", 16, 512, 10),
		loss(16, 10),
	}}
	for _, tc := range []struct {
		g       parallel.Graph
		devices int
	}{{seedsNet(32), 4}, {seedsNet(32), 8}, {mlp, 4}} {
		free := simulated(tc.devices, 1<<30)
		best, least := bruteForce(t, tc.g, tc.devices, free)
		plan, err := Search(tc.g, tc.devices, free)
		if err != nil {
			t.Fatal(err)
		}
		if !near(plan.StepSeconds, best.StepSeconds) {
			t.Errorf("%s on %d devices: search %v s %v, brute force %v s %v", tc.g.Model, tc.devices, plan.StepSeconds, plan.Strategy, best.StepSeconds, best.Strategy)
		}
		// A cap between the least memory and the unconstrained best's
		// binds: the answer must change and still match.
		if best.PeakMemory <= least {
			t.Fatalf("%s: the fastest plan already needs the least memory; no cap can bind", tc.g.Model)
		}
		capped := simulated(tc.devices, (least+best.PeakMemory)/2)
		cbest, _ := bruteForce(t, tc.g, tc.devices, capped)
		plan, err = Search(tc.g, tc.devices, capped)
		if err != nil {
			t.Fatal(err)
		}
		if cbest == nil || !near(plan.StepSeconds, cbest.StepSeconds) || !plan.Fits() {
			t.Errorf("%s on %d devices under %d bytes: search %v s %d bytes %v, brute force %+v", tc.g.Model, tc.devices, capped.Memory, plan.StepSeconds, plan.PeakMemory, plan.Strategy, cbest)
		}
		if cbest.StepSeconds <= best.StepSeconds {
			t.Errorf("%s: the cap did not bind", tc.g.Model)
		}
	}
}

func TestMachine(t *testing.T) {
	m := DefaultMachine()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	m.MemoryBandwidth = 8e9
	for _, tc := range []struct {
		cores, devices, threads int
		share                   float64
	}{
		{2, 8, 1, 0.25}, // 8 devices on 2 cores: a quarter each
		{2, 8, 2, 0.25}, // more threads do not make more cores
		{2, 2, 1, 1},
		{2, 1, 1, 1},
		{2, 1, 2, 2}, // one device with both cores
		{2, 1, 0, 1}, // 0 threads: 1
		{4, 2, 4, 2},
	} {
		s := m.ShareCores(tc.cores, tc.devices, tc.threads)
		if s.FLOPS != m.FLOPS*tc.share || s.MemoryBandwidth != 8e9*tc.share {
			t.Errorf("%d devices of %d threads on %d cores: %v FLOP/s and %v B/s each, want %v of %v and 8e9", tc.devices, tc.threads, tc.cores, s.FLOPS, s.MemoryBandwidth, tc.share, m.FLOPS)
		}
	}
	local, alone := LocalMachine(2, 8, 1), LocalMachine(2, 1, 1)
	if err := local.Validate(); err != nil {
		t.Fatal(err)
	}
	// A quarter of a core each, the FLOP/s scaled for 8 threads on 2 cores.
	if local.FLOPS != alone.FLOPS/4*oversubscribedCompute || local.MemoryBandwidth != alone.MemoryBandwidth/4 ||
		local.TransposedBandwidth != alone.TransposedBandwidth/4 || local.WeightGradBandwidth != alone.WeightGradBandwidth/4 {
		t.Errorf("8 devices on 2 cores: %+v, one alone: %+v", local, alone)
	}
	if two := LocalMachine(2, 2, 1); two.FLOPS != alone.FLOPS {
		t.Errorf("2 devices on 2 cores: %v FLOP/s each, want one alone's %v", two.FLOPS, alone.FLOPS)
	}
	// Within a server every kind is shared memory, but each its own
	// link; between servers every kind takes InterServer.
	for _, tc := range []struct {
		kind   Collective
		across bool
		want   Link
	}{
		{WholeAllReduce, false, local.IntraServer},
		{GroupAllReduce, false, local.IntraServerByKind[GroupAllReduce]},
		{Redistribution, false, local.IntraServerByKind[Redistribution]},
		{StageSendRecv, false, local.IntraServerByKind[Redistribution]},
		{WholeAllReduce, true, local.InterServer},
		{GroupAllReduce, true, local.InterServer},
		{Redistribution, true, local.InterServer},
		{StageSendRecv, true, local.InterServer},
	} {
		if got := local.link(tc.kind, tc.across); got != tc.want {
			t.Errorf("local %v across servers %v: %+v, want %+v", tc.kind, tc.across, got, tc.want)
		}
	}
	// The local kinds are distinct: a group reduction is cheaper per call
	// than the whole-job one, an Exchange slower per byte than either.
	if g, w, x := local.IntraServerByKind[GroupAllReduce], local.IntraServer, local.IntraServerByKind[Redistribution]; g.Latency >= w.Latency || x.Bandwidth >= g.Bandwidth || x.Bandwidth >= w.Bandwidth {
		t.Errorf("local links: group %+v, whole job %+v, exchange %+v", g, w, x)
	}
	bad := local
	bad.IntraServerByKind[Redistribution].Bandwidth = 0
	if err := bad.Validate(); !errors.Is(err, ErrMachine) || !strings.Contains(err.Error(), "Exchange") {
		t.Errorf("a latency without a bandwidth: %v", err)
	}
	bad.IntraServerByKind[Redistribution] = Link{}
	if err := bad.Validate(); err != nil {
		t.Errorf("no link of its own (IntraServer): %v", err)
	}
	if got := bad.link(Redistribution, false); got != bad.IntraServer {
		t.Errorf("no link of its own: %+v, want IntraServer %+v", got, bad.IntraServer)
	}
	bad.IntraServerByKind[GroupAllReduce].Latency = -time.Millisecond
	if err := bad.Validate(); !errors.Is(err, ErrMachine) || !strings.Contains(err.Error(), "GroupAllReduce") {
		t.Errorf("negative latency: %v", err)
	}
	bad = local
	bad.MemoryBandwidth = -1
	if err := bad.Validate(); !errors.Is(err, ErrMachine) {
		t.Errorf("negative memory bandwidth: %v", err)
	}
	m.DevicesPerServer = 0
	if err := m.Validate(); !errors.Is(err, ErrMachine) {
		t.Errorf("no devices per server: %v", err)
	}
}

func TestSearchOneDevice(t *testing.T) {
	plan, err := Search(cnn(8), 1, DefaultMachine())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan.Ops {
		if c.CommSeconds != 0 || c.Used != 1 {
			t.Errorf("%s on one device: comm %v s, %d devices used", c.Op, c.CommSeconds, c.Used)
		}
	}
	if plan.ComputeSeconds <= 0 || plan.StepSeconds != plan.ComputeSeconds {
		t.Errorf("step %v s, compute %v s", plan.StepSeconds, plan.ComputeSeconds)
	}
}
