package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/npu/shard"
)

// TestMain makes the test binary a rank process when started with
// Command, as the mspipe binary is.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == Command {
		if err := Run(context.Background(), os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// What the stage writes is what a rank reads, every field typed: the mode
// and the transport by name, the strategy as one map, sizes in bytes.
func TestConfigRoundTrip(t *testing.T) {
	want := Config{
		Model: "semi_auto_net", Mode: parallel.SemiAutoParallel,
		Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, FullBatch: true, DeviceMemory: 3 << 29,
		DataDir: "/d", Epochs: 2, BatchSize: 4, GradAccumulation: 2, LearningRate: 0.01, Momentum: 0.9,
		WeightDecay: 1e-4, Schedule: "cosine", WarmupEpochs: 1, Seed: 3, ShuffleBuffer: -1, Threads: 1,
		Eval: true, LogSteps: 5, Prefix: "net", SaveCheckpointSteps: 3, KeepCheckpointMax: 2, CRCCheck: true,
		IntegratedSave: true, InitDir: "/init", StrategyFile: "/job/strategy.ckpt",
		GradientsMean: true, ParameterBroadcast: true, CollectiveTimeout: 90 * time.Second,
		Transport: Transport(collective.TransportTCP), BasePort: 29500, SecretFile: "/job/job.secret",
		SpansHosts: true, LeadRank: 8,
	}
	path := filepath.Join(t.TempDir(), ConfigFile)
	if err := WriteConfig(path, want); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["mode"] != "semi_auto_parallel" || fields["collective_transport"] != "tcp" || fields["device_memory"] != float64(3<<29) {
		t.Errorf("mode %v, transport %v, memory %v: want names and bytes", fields["mode"], fields["collective_transport"], fields["device_memory"])
	}
	if _, ok := fields["with"]; ok {
		t.Error("the config carries a with block")
	}
	got, err := decodeConfig(raw, path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, want)
	}
	// A config of another version (the stage's with block in it) fails
	// naming the field instead of training with defaults.
	if _, err := decodeConfig([]byte(`{"with":{"mode":"data_parallel"}}`), path); err == nil || !strings.Contains(err.Error(), `unknown field "with"`) || !strings.Contains(err.Error(), path) {
		t.Errorf("old config: %v", err)
	}
	if _, err := decodeConfig([]byte(`{"collective_transport":"carrier pigeon"}`), path); err == nil {
		t.Error("an unknown transport was accepted")
	}
}

// A rank's trainer gets its share of the job: its shard of the data in
// data_parallel, the whole global batch with full_batch, evaluation on
// rank 0 only unless the network is split, and the stage's sizes as they
// are.
func TestTrainerConfig(t *testing.T) {
	tc, err := TrainerConfig(Config{Model: "resnet20", Mode: parallel.DataParallel, BatchSize: 4, Eval: true, DeviceMemory: 1 << 30, Momentum: 0.9}, 3, 8, nil)
	if err != nil || tc.NumShards != 8 || tc.ShardID != 3 || tc.BatchSize != 4 || tc.Eval || tc.DeviceMemory != 1<<30 || tc.NoMomentum || tc.CkptDir != "ckpt_3" {
		t.Errorf("data_parallel rank 3 of 8: %+v, %v", tc, err)
	}
	tc, err = TrainerConfig(Config{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, FullBatch: true, BatchSize: 4, Eval: true}, 3, 8, nil)
	if err != nil || tc.NumShards != 1 || tc.BatchSize != 32 || !tc.Eval || !tc.NoMomentum {
		t.Errorf("full_batch rank 3 of 8: shards %d, batch %d, eval %v, no momentum %v, %v", tc.NumShards, tc.BatchSize, tc.Eval, tc.NoMomentum, err)
	}
	tc, err = TrainerConfig(Config{Model: "cnn", Eval: true}, 0, 1, nil)
	if err != nil || tc.NumShards != 1 || !tc.Eval || tc.Threads < 1 {
		t.Errorf("stand_alone: %+v, %v", tc, err)
	}
	if _, err := TrainerConfig(Config{Model: "cnn", InitDir: t.TempDir()}, 1, 2, nil); err == nil || !strings.Contains(err.Error(), "init: rank 1") {
		t.Errorf("an init directory without the rank's checkpoints: %v", err)
	}
}

// The mode/strategy rules hold for the stage's checks and the engine
// alike: a strategy only where the mode takes one, a self-splitting model
// only in hybrid_parallel; Plan names the option at fault.
func TestPlanRefuses(t *testing.T) {
	seeds := parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}
	for _, tc := range []struct {
		l     Layout
		field string
		want  string
	}{
		{Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 3}}}, BatchSize: 4, Devices: 8}, "strategy", "does not divide the job's 8"},
		{Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"fc.matmull": {{1, 1}, {1, 2}}}, BatchSize: 4, Devices: 8}, "strategy", `no operator "fc.matmull"`},
		{Layout{Model: "resnet21", Mode: parallel.HybridParallel, BatchSize: 4, Devices: 8}, "model", `unknown model "resnet21"`},
	} {
		_, err := Plan(tc.l)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "with."+tc.field+": ") {
			t.Errorf("%+v: %v, want with.%s saying %q", tc.l, err, tc.field, tc.want)
		}
	}
	p, err := Plan(Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: seeds, BatchSize: 4, Devices: 8})
	if err != nil || !reflect.DeepEqual(p.Strategy, seeds) || p.Auto != nil {
		t.Errorf("the seeds' strategy: %+v, %v", p, err)
	}
	p, err = Plan(Layout{Model: "wide_net", Mode: parallel.AutoParallel, BatchSize: 2, Devices: 4, Memory: 128 << 20})
	if err != nil || p.Auto == nil || len(p.Strategy) == 0 {
		t.Errorf("auto_parallel: %+v, %v", p, err)
	}
	if p, err := Plan(Layout{Model: "resnet20", Mode: parallel.DataParallel, BatchSize: 4, Devices: 8}); err != nil || p.Strategy != nil {
		t.Errorf("data_parallel resnet20 has nothing to plan: %+v, %v", p, err)
	}

	// The rules themselves, as the stage and the engine both ask them.
	if err := parallel.DataParallel.CheckStrategy(false); err == nil {
		t.Error("data_parallel took a strategy")
	}
	if err := shard.CheckModelMode("hybrid_net", parallel.SemiAutoParallel); err == nil || !strings.Contains(err.Error(), "it runs in mode hybrid_parallel, not semi_auto_parallel") {
		t.Errorf("hybrid_net in semi_auto_parallel: %v", err)
	}
	for _, ok := range []struct {
		model string
		mode  parallel.Mode
	}{{"hybrid_net", parallel.HybridParallel}, {"semi_auto_net", parallel.HybridParallel}, {"resnet20", parallel.StandAlone}, {"no_such_net", parallel.DataParallel}} {
		if err := shard.CheckModelMode(ok.model, ok.mode); err != nil {
			t.Errorf("%s in %s: %v", ok.model, ok.mode, err)
		}
	}
	_, err = shard.New(shard.Config{Model: "semi_auto_net", Mode: parallel.DataParallel, Strategy: seeds, Devices: 1, BatchPerDevice: 2, Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "mode data_parallel takes none") {
		t.Errorf("the engine given a strategy in data_parallel: %v", err)
	}
}

// PlanText prices a split job with the trainer's defaults filled in, and
// says nothing about modes that do not split the network.
func TestPlanText(t *testing.T) {
	var b strings.Builder
	if err := PlanText(&b, Layout{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, Devices: 8}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "semi_auto_net in semi_auto_parallel on 8 devices, global batch 256:\n") || !strings.Contains(b.String(), "fc.matmul") {
		t.Errorf("plan:\n%s", b.String())
	}
	b.Reset()
	if err := PlanText(&b, Layout{Mode: parallel.DataParallel, Devices: 8}); err != nil || b.Len() != 0 {
		t.Errorf("data_parallel: %q, %v", b.String(), err)
	}
}

func TestParseDeviceMemory(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", 0, false}, {"32GiB", 32 << 30, false}, {"1.5GiB", 3 << 29, false}, {"512MiB", 512 << 20, false},
		{"1048576", 1 << 20, false}, {"2097152B", 2 << 20, false},
		{"32GB", 32e9, false},
		{"100KiB", 0, true}, {"lots", 0, true}, {"-1GiB", 0, true}, {"2048TiB", 0, true}, {"1.5B", 0, true},
	} {
		got, err := ParseDeviceMemory(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("ParseDeviceMemory(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// A rank that failed because of a peer names it in its device directory;
// any other failure leaves nothing.
func TestBlame(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	leaveBlame(errors.New("disk full"))
	if _, ok := ReadBlame(dir); ok {
		t.Error("a failure of the rank's own left blame")
	}
	leaveBlame(fmt.Errorf("gradient allreduce: %w", &collective.PeerError{Op: "allreduce", Rank: 3, Err: collective.ErrPeerClosed, Via: -1}))
	if peer, ok := ReadBlame(dir); !ok || peer != 3 {
		t.Errorf("blame: rank %d, %v; want 3", peer, ok)
	}
}

// Two rank processes of a data_parallel job train what one stand_alone
// process trains on the same global batches: the same steps, the same
// loss over the global batch, and the same parameters and moments up to
// float32 rounding (the stage's equivalence test
// bounds it, with its reasons, at 1e-4).
func TestTwoRanksEqualStandAlone(t *testing.T) {
	root := t.TempDir()
	m, err := data.Prepare(context.Background(), root, data.PrepareOptions{Source: data.SourceSynthetic, Synth: data.SynthConfig{Seed: 7, TrainPerBatch: 8, TestRecords: 20}})
	if err != nil {
		t.Fatal(err)
	}
	base := Config{
		Model: "cnn", DataDir: filepath.Join(root, filepath.Base(m.DataDir)), Epochs: 1,
		LearningRate: 0.01, Momentum: 0.9, Seed: 3, Threads: 1, ShuffleBuffer: -1,
		GradientsMean: true, CollectiveTimeout: 30 * time.Second,
	}
	alone := base
	alone.BatchSize = 8
	aloneDir := runJob(t, alone, 1)
	dp := base
	dp.Mode, dp.BatchSize = parallel.DataParallel, 4
	dpDir := runJob(t, dp, 2)

	want, err := ReadResult(launch.DeviceDir(aloneDir, 0))
	if err != nil {
		t.Fatal(err)
	}
	meanLoss := 0.0 // each rank's loss is that of its half of the batch
	for rank := range 2 {
		got, err := ReadResult(launch.DeviceDir(dpDir, rank))
		if err != nil {
			t.Fatal(err)
		}
		meanLoss += got.Loss / 2
		if got.GlobalStep != 5 || got.GlobalStep != want.GlobalStep {
			t.Errorf("rank %d: step %d; stand_alone: step %d, want 5", rank, got.GlobalStep, want.GlobalStep)
		}
		wantT, gotT := tensors(t, want.Checkpoint), tensors(t, got.Checkpoint)
		if len(gotT) != len(wantT) {
			t.Fatalf("rank %d: %d tensors, stand_alone %d", rank, len(gotT), len(wantT))
		}
		for name, w := range wantT {
			g := gotT[name]
			var diff, norm float64
			for i := range w {
				diff += (float64(g[i]) - float64(w[i])) * (float64(g[i]) - float64(w[i]))
				norm += float64(w[i]) * float64(w[i])
			}
			if len(g) != len(w) || norm > 0 && math.Sqrt(diff/norm) > 1e-4 {
				t.Errorf("rank %d: %s differs from stand_alone's (relative %.3g)", rank, name, math.Sqrt(diff/norm))
			}
		}
	}
	if math.Abs(meanLoss-want.Loss) > 1e-4*math.Abs(want.Loss) {
		t.Errorf("last step's loss: mean of the ranks %v, stand_alone %v", meanLoss, want.Loss)
	}
}

// runJob writes cfg in a fresh job directory and runs its ranks as
// processes of this test binary, as the stage does, with a rank table,
// ports and a secret for a collective mode.
func runJob(t *testing.T, cfg Config, ranks int) string {
	t.Helper()
	dir := t.TempDir()
	table, err := launch.LocalRankTable(dir, ranks)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode.Collective() {
		cfg.BasePort = freePorts(t, table, ranks)
		secret, err := collective.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		cfg.SecretFile = filepath.Join(dir, "job.secret")
		if err := os.WriteFile(cfg.SecretFile, secret, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	if err := WriteConfig(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	j := launch.Job{Path: os.Args[0], Args: []string{Command, cfgPath}, Dir: dir, RankSize: ranks, RankTable: table}
	for r := range ranks {
		j.Ranks = append(j.Ranks, launch.Rank{RankID: r, DeviceID: r})
	}
	if err := launch.Run(context.Background(), j); err != nil {
		t.Fatalf("%s with %d ranks: %v", cfg.Mode, ranks, err)
	}
	return dir
}

// freePorts returns a base port from which every rank of table can listen
// now.
func freePorts(t *testing.T, table string, ranks int) int {
	t.Helper()
	tab, _, err := ranktable.Load(table)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := tab.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		base, free := 20000+rand.IntN(30000), true
		for i := range ranks {
			ln, err := net.Listen("tcp", net.JoinHostPort(rs[i].ListenIP(), fmt.Sprint(base+i)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// tensors reads a checkpoint's float32 tensors by name.
func tensors(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	all, err := ckpt.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, tt := range all {
		if tt.DType != ckpt.DTypeFloat32 {
			continue
		}
		v, err := tt.Float32s()
		if err != nil {
			t.Fatalf("%s: %v", tt.Name, err)
		}
		out[tt.Name] = v
	}
	return out
}
