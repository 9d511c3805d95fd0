// Package train provides the npu/train built-in stage: it trains a model on
// the stage's cluster of simulated Ascend devices the way the seeds' run.sh
// does — one worker process per device, each in device{i}/ with
// DEVICE_ID, RANK_ID, RANK_SIZE and RANK_TABLE_FILE set, env{i}.log and
// train.log{i} written, checkpoints in device{i}/ckpt_{i}/ — and reports the
// loss, accuracy and throughput.
//
// Modes: stand_alone (one device), data_parallel (every device trains a
// full replica on its shard of the data; gradients are averaged by an
// AllReduce between the rank processes, as HCCL does: through shared memory
// within each server of the rank table, over TCP between servers), and the
// split modes semi_auto_parallel, auto_parallel and hybrid_parallel, which
// run on the operator-parallel engine (npu/shard; parallel.go plans them).
//
// Launchers (launcher.go): local starts this host's ranks itself — all of
// them, or on a rank table that spans servers the ranks whose address is
// this host's, as the seeds' run_cluster.sh runs on every server
// (hosts.go); mpirun and srun start every rank of the job from here.
//
// Every device has a memory capacity (device_memory, default an Ascend
// 910's 32 GiB) that the model's buffers are counted against; a job that
// does not fit fails naming the buffer, as a real device would.
//
// Progress is data: every rank reports each finished step (epoch, step,
// global step, loss, learning rate, images/s, device memory) as a JSON line
// on a pipe the stage hands it (events.go), and the stage sends them on as
// step events, rank 0's printed lines as log records. train.log{i} keeps
// MindSpore's LossMonitor lines for people; nothing reads it back. A rank
// that fails sends its error on the same pipe, so the stage's error says
// why even when train.log{i} is on a full disk.
//
// BatchNorm in data_parallel keeps per-device statistics, as MindSpore does
// by default: each device normalizes with its own batch's mean and variance
// and updates its own moving statistics, so checkpoints of different ranks
// differ in bn*.moving_mean and bn*.moving_variance only.
package train

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "npu/train"

// version is part of every cache key: bump it when results change.
const version = "1.1.0"

// WorkerCommand is the hidden mspipe subcommand a rank process runs.
const WorkerCommand = "__npu-worker"

// With is the stage's `with` block.
type With struct {
	Data                string             `json:"data" jsonschema:"minLength=1,format=path" description:"cifar-10-batches-bin directory (usually stages.prepare.outputs.dir)"`
	Model               string             `json:"model,omitempty" jsonschema:"enum=resnet20|resnet50|cnn|semi_auto_net|hybrid_net|wide_net" description:"resnet20: the small CIFAR ResNet (the CPU default); resnet50: the seeds' ResNet-50; cnn: a small CNN without BatchNorm (data parallel equals stand_alone exactly); semi_auto_net: the seeds' SemiAutoParallelNet as a CIFAR classifier (fc.matmul, relu, end_point); hybrid_net: the seeds' HybridParallelNet (hybrid_parallel only); wide_net: a 3072x4096 layer that does not fit a small device whole"`
	Mode                parallel.Mode      `json:"mode,omitempty" description:"MindSpore parallel_mode: stand_alone (one device), data_parallel (a replica per device, gradients all-reduced), semi_auto_parallel (operators split by strategy), auto_parallel (strategies searched by a cost model; see mspipe plan), hybrid_parallel (the model's own split, e.g. hybrid_net)"`
	Strategy            map[string][][]int `json:"strategy,omitempty" description:"semi_auto_parallel: shard strategy per operator, as MindSpore's shard(), e.g. {fc.matmul: [[1, 1], [1, 2]]}: one list per input, one split count per dimension; operators without one run data parallel"`
	FullBatch           bool               `json:"full_batch,omitempty" description:"every device loads the whole global batch (batch_size × devices) instead of its shard"`
	GradAccumulation    int                `json:"grad_accumulation_step,omitempty" jsonschema:"minimum=1" description:"micro-batches per step: the update is that of one batch this many times larger"`
	StrategySaveFile    string             `json:"strategy_ckpt_save_file,omitempty" description:"where to write the strategy file (MindSpore's ParallelStrategyMap protobuf; .json for the JSON form), relative to the stage's work directory; default strategy.ckpt for split modes"`
	Epochs              int                `json:"epochs,omitempty" jsonschema:"minimum=1"`
	BatchSize           int                `json:"batch_size,omitempty" jsonschema:"minimum=1" description:"batch size per device"`
	LearningRate        float64            `json:"learning_rate,omitempty" jsonschema:"exclusiveMinimum=0"`
	Momentum            float64            `json:"momentum,omitempty" jsonschema:"minimum=0,exclusiveMaximum=1"`
	WeightDecay         float64            `json:"weight_decay,omitempty" jsonschema:"minimum=0"`
	LRSchedule          string             `json:"lr_schedule,omitempty" jsonschema:"enum=constant|cosine|step|steps|poly|linear"`
	WarmupEpochs        int                `json:"warmup_epochs,omitempty" jsonschema:"minimum=0"`
	Seed                int                `json:"seed,omitempty" jsonschema:"minimum=0"`
	Init                string             `json:"init,omitempty" jsonschema:"format=path" description:"checkpoint file, or a directory with device{i}/ckpt_{i}/ per rank, to start from"`
	GradientsMean       *bool              `json:"gradients_mean,omitempty" description:"data parallel: average gradients (allreduce_mean) instead of summing; default true"`
	ParameterBroadcast  bool               `json:"parameter_broadcast,omitempty" description:"data parallel: broadcast rank 0's initial parameters"`
	SaveCheckpointSteps int                `json:"save_checkpoint_steps,omitempty" jsonschema:"minimum=1" description:"save every this many steps (default: once per epoch)"`
	KeepCheckpointMax   int                `json:"keep_checkpoint_max,omitempty" jsonschema:"minimum=1"`
	Prefix              string             `json:"prefix,omitempty" jsonschema:"pattern=^[A-Za-z0-9_.]+$"`
	IntegratedSave      *bool              `json:"integrated_save,omitempty" description:"split modes: true (MindSpore's default) has rank 0 save whole tensors; false has every rank save its slices (merge them with ckpt/integrate or mspipe ckpt merge)"`
	DeviceMemory        string             `json:"device_memory,omitempty" description:"memory capacity of each simulated device, e.g. 32GiB (the default, an Ascend 910's HBM), 512MiB; a model that does not fit fails naming the buffer"`
	Eval                *bool              `json:"eval,omitempty" description:"measure held-out accuracy after training; default true"`
	LogSteps            int                `json:"log_steps,omitempty" jsonschema:"minimum=0" description:"print a LossMonitor line every this many steps (0: once per epoch, as in sink mode)"`
	Threads             int                `json:"threads,omitempty" jsonschema:"minimum=0" description:"compute threads per device (0: the machine's cores divided among the devices)"`
	CollectiveTimeout   sdk.Duration       `json:"collective_timeout,omitempty" description:"how long a rank waits for its peers in a collective before failing (default 60s)"`
	CollectiveBasePort  int                `json:"collective_base_port,omitempty" jsonschema:"minimum=1,maximum=65535" description:"port of rank 0's collective endpoint; rank r listens on its device_ip, port collective_base_port+r. Default 29500 when the rank table spans several hosts (every server must use the same); a single-host job picks a free range unless this is set"`
	CollectiveTransport string             `json:"collective_transport,omitempty" jsonschema:"enum=auto|shm|tcp" description:"how ranks exchange gradients: shm (shared memory; every rank on this host), tcp (loopback or network), auto (shm within each server of the rank table, tcp between servers)"`
	ShuffleBuffer       int                `json:"shuffle_buffer,omitempty" jsonschema:"minimum=-1" description:"dataset.shuffle(buffer_size) after the map (0: the seeds' 10; -1: none, so data_parallel and stand_alone see the same global batches)"`
	Launcher            launch.Launcher    `json:"launcher,omitempty" description:"what starts the rank processes: local (mspipe, on this host), mpirun (Open MPI, on the hosts of a hostfile) or srun (Slurm, inside an allocation); with mpirun and srun the run directory and the rank table must be on a filesystem every host sees"`
	LauncherArgs        []string           `json:"launcher_args,omitempty" description:"mpirun or srun: extra arguments, appended to mspipe's own as they are (one argument per item, no shell)"`
	Hostfile            string             `json:"hostfile,omitempty" description:"mpirun: an absolute path to an Open MPI hostfile; default one written in the work directory from the rank table's servers, in table order, with slots=<devices>"`
}

// defaults is the stage's one table of defaults: the trainer's, and the
// stage's own. The schema's defaults come from it, and the SDK fills absent
// fields with them. The mode's default is its zero value, stand_alone,
// which parallel.Mode's own schema declares.
func defaults() With {
	t := trainer.Defaults()
	return With{
		Model: t.Model, Epochs: t.Epochs, BatchSize: t.BatchSize,
		LearningRate: t.LearningRate, Momentum: t.Momentum, LRSchedule: t.Schedule,
		KeepCheckpointMax: t.KeepCheckpointMax, Prefix: t.Prefix,
		Seed:                1,
		CollectiveTransport: collective.TransportAuto.String(),
	}
}

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Train a model on simulated Ascend devices, one process per device, MindSpore-style",
		Outputs: []plugins.OutputSpec{
			{Name: "checkpoints", Type: plugins.TypePath, Description: "directory holding device{i}/ckpt_{i}/ for every rank"},
			{Name: "checkpoint", Type: plugins.TypePath, Description: "rank 0's last checkpoint file"},
			{Name: "loss", Type: plugins.TypeFloat, Description: "loss of the last step (rank 0)"},
			{Name: "accuracy", Type: plugins.TypeFloat, Description: "held-out accuracy (0-1) of rank 0's model; -1 when eval is off"},
			{Name: "global_step", Type: plugins.TypeInt},
			{Name: "wall_time", Type: plugins.TypeFloat, Description: "seconds of training"},
			{Name: "images_per_second", Type: plugins.TypeFloat, Description: "training images per second, all devices of this host together (every device unless the rank table spans hosts)"},
			{Name: "peak_device_memory", Type: plugins.TypeInt, Description: "most memory in use at once on any device, in bytes"},
			{Name: "strategy", Type: plugins.TypeString, Description: "the strategy file of a split network (semi_auto/auto/hybrid parallel on several devices), or \"\""},
		},
		Defaults:     defaults(),
		Check:        check,
		CheckCluster: checkCluster,
		Execute:      execute,
	}
}

func check(w With) []plugins.Problem {
	var out []plugins.Problem
	if _, err := parseMemory(w.DeviceMemory); err != nil {
		out = append(out, plugins.Problem{Path: "/device_memory", Message: err.Error()})
	}
	out = append(out, launcherProblems(w)...)
	return append(out, checkSaveFile(w)...)
}

// checkCluster checks what depends on several fields or on the cluster:
// options that do not fit the mode, and a strategy against the model's
// operators on the stage's device count (before any rank starts: at
// validation, or when the run begins). Rules over a field known only at
// run time are left for then.
func checkCluster(w With, cluster plugins.Cluster, unknown []string) []plugins.Problem {
	known := func(keys ...string) bool {
		for _, k := range keys {
			if slices.Contains(unknown, k) {
				return false
			}
		}
		return true
	}
	var out []plugins.Problem
	if known("mode", "strategy") && len(w.Strategy) > 0 && w.Mode != parallel.SemiAutoParallel {
		why := "it does not split operators"
		switch w.Mode {
		case parallel.AutoParallel:
			why = "it searches every operator's strategy itself (see mspipe plan)"
		case parallel.HybridParallel:
			why = "the model declares its own split"
		}
		out = append(out, plugins.Problem{Path: "/strategy", Message: fmt.Sprintf("shard strategies are for %s; mode %s takes none: %s", parallel.SemiAutoParallel, w.Mode, why)})
	}
	if known("mode", "full_batch") && w.FullBatch && !w.Mode.Sharded() {
		out = append(out, plugins.Problem{Path: "/full_batch", Message: fmt.Sprintf("full_batch is for the modes that split the network (semi_auto_parallel, auto_parallel, hybrid_parallel), not %s", w.Mode)})
	}
	if known("mode", "model") && w.Model == "hybrid_net" && w.Mode != parallel.HybridParallel {
		out = append(out, plugins.Problem{Path: "/model", Message: "hybrid_net splits itself (layerwise_parallel parameters, an explicit AllReduce): it runs in mode hybrid_parallel"})
	}
	if len(out) > 0 || cluster.Devices < 1 || !known("mode", "model", "strategy", "batch_size", "full_batch") || w.Mode != parallel.SemiAutoParallel {
		return out
	}
	return strategyProblems(w, cluster.Devices)
}

// strategyProblems checks a semi_auto_parallel strategy on devices
// devices: each operator's entry on its own (at /strategy/<operator>),
// then the whole (shared parameters laid out one way).
func strategyProblems(w With, devices int) []plugins.Problem {
	g, err := shard.GraphOf(w.Model, globalBatch(w, devices))
	if err != nil {
		return []plugins.Problem{{Path: "/model", Message: err.Error()}}
	}
	var out []plugins.Problem
	for _, name := range slices.Sorted(maps.Keys(w.Strategy)) {
		at := "/strategy/" + pointerToken(name)
		op, ok := g.Op(name)
		if !ok {
			out = append(out, plugins.Problem{Path: at, Message: fmt.Sprintf("%v: %s has no operator %q (operators: %s)", parallel.ErrStrategy, g.Model, name, strings.Join(g.OpNames(), ", "))})
			continue
		}
		if _, err := op.Shard(w.Strategy[name], devices); err != nil {
			out = append(out, plugins.Problem{Path: at, Message: err.Error()})
		}
	}
	if len(out) > 0 {
		return out
	}
	if _, err := g.Shard(parallel.Strategy(w.Strategy), devices); err != nil {
		out = append(out, plugins.Problem{Path: "/strategy", Message: err.Error()})
	}
	return out
}

// pointerToken escapes a key for a JSON pointer (RFC 6901).
func pointerToken(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// WorkerConfig is what the stage hands each rank process (worker.json).
type WorkerConfig struct {
	With     With   `json:"with"`
	Seed     uint64 `json:"seed"`
	Threads  int    `json:"threads"`
	InitFile string `json:"init_file,omitempty"` // "" or a file; a directory is resolved per rank
	InitDir  string `json:"init_dir,omitempty"`
	// BasePort is the port of rank 0's collective endpoint; rank r listens
	// on its rank table device_ip, port BasePort+r.
	BasePort int `json:"base_port,omitempty"`
	// Strategy is what split ranks run: the user's (semi_auto_parallel)
	// or the searched one (auto_parallel).
	Strategy parallel.Strategy `json:"strategy,omitempty"`
	// StrategyFile is where rank 0 writes the strategy file ("" for none).
	StrategyFile string `json:"strategy_file,omitempty"`
	// SecretFile holds the job secret (mode 0600) that lets ranks
	// authenticate each other; it is not in the environment, because
	// env{i}.log records the environment.
	SecretFile string `json:"secret_file,omitempty"`
	// SpansHosts is set when ranks of the job run on other servers (they
	// are started there by the same pipeline), so ranks wait longer for
	// their peers to come up.
	SpansHosts bool `json:"spans_hosts,omitempty"`
	// LeadRank is the rank whose lines the stage shows: 0, or this host's
	// lowest rank when rank 0 runs on another server.
	LeadRank int `json:"lead_rank,omitempty"`
}

// WorkerResult is what a rank process leaves in result.json.
type WorkerResult struct {
	Rank         int     `json:"rank"`
	Loss         float64 `json:"loss"`
	Accuracy     float64 `json:"accuracy"`
	GlobalStep   int     `json:"global_step"`
	Seconds      float64 `json:"seconds"`
	ImagesPerSec float64 `json:"images_per_second"`
	Checkpoint   string  `json:"checkpoint"`
	ResumedFrom  string  `json:"resumed_from,omitempty"`
	PeakMemory   int64   `json:"peak_device_memory"` // bytes
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	req := sc.Request()
	devices := max(req.Cluster.Devices, 1)
	if w.Mode.OneDevice() && devices != 1 {
		return nil, fmt.Errorf("mode %s trains on one device, but the stage's cluster has %d: use mode %s, or set cluster: {devices: 1} on this stage", w.Mode, devices, parallel.DataParallel)
	}
	if err := checkData(w.Data); err != nil {
		return nil, err
	}
	memory, err := parseMemory(w.DeviceMemory)
	if err != nil {
		return nil, err
	}
	// A strategy that cannot run on this cluster fails here, before any
	// rank process starts; auto_parallel's search runs here too, once.
	plan, err := planParallel(w, devices, memory)
	if err != nil {
		return nil, err
	}
	jobDir := sc.WorkDir()
	strategyFile, err := checkWrites(jobDir, w, devices)
	if err != nil {
		return nil, err
	}
	rankTable := req.Cluster.RankTable
	if rankTable == "" {
		var err error
		if rankTable, err = launch.LocalRankTable(jobDir, devices); err != nil {
			return nil, err
		}
	}
	cfg := WorkerConfig{With: w, Seed: uint64(w.Seed), Threads: w.Threads, Strategy: plan.Strategy}
	if plan.Auto != nil {
		var table strings.Builder
		if err := plan.Auto.Format(&table); err == nil {
			sc.Info("auto_parallel chose (predicted by its cost model):\n" + strings.TrimRight(table.String(), "\n"))
		}
	}
	if cfg.StrategyFile = strategyFile; strategyFile != "" {
		_ = os.Remove(strategyFile)
	}
	// here lists the ranks of a collective job that run on this host (all
	// of them unless the rank table spans hosts).
	var here []ranktable.Rank
	if w.Mode.Collective() {
		t, problems, err := ranktable.Load(rankTable)
		if err != nil {
			return nil, err
		}
		if problems.HasErrors() {
			return nil, fmt.Errorf("rank table %s: %w", rankTable, problems.Err())
		}
		if w.Launcher != launch.Local {
			// mpirun or srun starts every rank, on every server, from here.
			if err := externalCollective(w, t, jobDir, &cfg); err != nil {
				return nil, err
			}
		} else {
			// Every server runs this same stage and starts its own ranks.
			share, err := localShare(t, canListen, interfaceAddrs)
			if err != nil {
				return nil, err
			}
			if share.SpansHosts() {
				sc.Info(share.Describe())
				cfg.SpansHosts, cfg.LeadRank = true, share.Lead()
			}
			here = share.Ranks
			if cfg.SecretFile, err = sharedSecretFile(share.SpansHosts()); err != nil {
				return nil, err
			}
			if cfg.BasePort, err = basePort(w, t, share); err != nil {
				return nil, err
			}
		}
		if cfg.SecretFile == "" {
			if cfg.SecretFile, err = writeSecret(jobDir); err != nil {
				return nil, err
			}
		}
	}
	if w.Init != "" {
		st, err := os.Stat(w.Init)
		if err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		if st.IsDir() {
			cfg.InitDir = w.Init
		} else {
			cfg.InitFile = w.Init
		}
	}
	cfgPath := filepath.Join(jobDir, "worker.json")
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(cfgPath, raw, 0o644); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ranks := make([]launch.Rank, devices)
	for i := range ranks {
		ranks[i] = launch.Rank{RankID: i, DeviceID: i % 8}
	}
	if here != nil {
		ranks = ranks[:0]
		for _, r := range here {
			ranks = append(ranks, launch.Rank{RankID: r.RankID, DeviceID: r.DeviceID})
		}
	}
	sc.Info(fmt.Sprintf("training %s in mode %s on %d device(s)", w.Model, w.Mode, devices))
	for _, r := range ranks {
		_ = os.Remove(filepath.Join(launch.DeviceDir(jobDir, r.RankID), "result.json"))
		_ = os.Remove(filepath.Join(launch.DeviceDir(jobDir, r.RankID), blameFile))
	}
	events, sink, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("event stream: %w", err)
	}
	defer events.Close()
	relayed := make(chan error, 1)
	failures := map[int]string{} // read once relayed has answered
	go func() { relayed <- relayEvents(events, sc, devices, cfg.LeadRank, failures) }()
	job := launch.Job{
		Path: self, Args: []string{WorkerCommand, cfgPath},
		Dir: jobDir, RankSize: devices, Ranks: ranks, RankTable: rankTable,
		ExtraFiles: []*os.File{sink},
		// Only the processes started here hold the pipe, so only they are
		// told its number (worker.json may be reused by hand).
		Env: []string{fmt.Sprintf("%s=%d", EnvEventFD, eventFD)},
	}
	if w.Mode.Collective() {
		// Let the other ranks see a dead peer in their collectives (and say
		// so in their logs) before stopping them.
		job.PeerFailWait = collectiveTimeout(w) + 5*time.Second
		// A rank that every other one blames (it hangs) is stopped at once.
		job.Blame = func(r launch.Rank) (int, bool) { return readBlame(jobDir, r) }
	}
	var runErr error
	if w.Launcher == launch.Local {
		runErr = launch.Run(ctx, job)
	} else {
		runErr = runExternal(ctx, sc, w, job)
	}
	// The ranks are gone: once the stage's write end is closed too, the
	// relay reads what is left and ends. A process that escaped its rank's
	// process group may still hold a write end: do not wait for it long.
	sink.Close()
	_ = events.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := <-relayed; err != nil {
		sc.Warn(err.Error())
	}
	if w.Mode.Collective() {
		// Ranks unlink their shared memory as soon as all have mapped it;
		// only a rank killed in between leaves a file behind.
		if err := removeShmLeftovers(rankTable, cfg); err != nil {
			sc.Warn(fmt.Sprintf("remove shared memory left by the ranks: %v", err))
		}
	}
	if runErr != nil {
		return nil, withReportedFailures(runErr, failures)
	}
	// Results are those of this host's ranks; the lead rank's (rank 0's
	// when it runs here) become the outputs.
	results := make([]WorkerResult, len(ranks))
	ips := 0.0
	var peak int64
	var r0 WorkerResult
	for i, r := range ranks {
		data, err := os.ReadFile(filepath.Join(launch.DeviceDir(jobDir, r.RankID), "result.json"))
		if err != nil {
			return nil, fmt.Errorf("rank %d left no result: %w", r.RankID, err)
		}
		if err := json.Unmarshal(data, &results[i]); err != nil {
			return nil, fmt.Errorf("rank %d result.json: %w", r.RankID, err)
		}
		ips += results[i].ImagesPerSec
		peak = max(peak, results[i].PeakMemory)
		if r.RankID == cfg.LeadRank {
			r0 = results[i]
		}
	}
	return map[string]any{
		"checkpoints":        jobDir,
		"checkpoint":         r0.Checkpoint,
		"loss":               r0.Loss,
		"accuracy":           r0.Accuracy,
		"global_step":        r0.GlobalStep,
		"wall_time":          r0.Seconds,
		"images_per_second":  ips,
		"peak_device_memory": peak,
		"strategy":           strategyOutput(cfg.StrategyFile),
	}, nil
}

// withReportedFailures adds to the launcher's error what the failed ranks
// reported on the event stream, unless the error already quotes one of
// those reports from a log: on a full disk, "no space left on device" is
// the line a log may have no room for.
func withReportedFailures(err error, failures map[int]string) error {
	var reports []string
	for _, rank := range slices.Sorted(maps.Keys(failures)) {
		if strings.Contains(err.Error(), failures[rank]) {
			return err
		}
		reports = append(reports, fmt.Sprintf("rank %d: %s", rank, failures[rank]))
	}
	if len(reports) == 0 {
		return err
	}
	return fmt.Errorf("%w; failed ranks reported: %s", err, strings.Join(reports, "; "))
}

// defaultStrategyFile is the strategy file a split job writes in its work
// directory when with.strategy_ckpt_save_file does not name one.
const defaultStrategyFile = "strategy.ckpt"

// strategyOutput returns path when rank 0 wrote it, else "".
func strategyOutput(path string) string {
	if path == "" {
		return ""
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

func checkData(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("data %q: give an absolute path (usually ${{ stages.prepare.outputs.dir }})", dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("data %s: not a directory", dir)
	}
	return nil
}

// parseMemory reads a device memory size: bytes, or a number with KiB, MiB,
// GiB or TiB ("32GiB", "1.5GiB"); "" means the default.
func parseMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num, mult := s, 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	n := v * mult
	if err != nil || n < 1<<20 || n > 1<<50 {
		return 0, fmt.Errorf("device memory %q: want a size from 1MiB to 1024TiB, like 32GiB or 512MiB", s)
	}
	return int64(n), nil
}
