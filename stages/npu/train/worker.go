package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
)

// RunWorker is the body of one rank process: it reads the job's
// worker.json, takes its rank from RANK_ID/RANK_SIZE/DEVICE_ID as the
// seeds' training scripts do, trains with checkpoints in ckpt_{rank}/ of
// the current directory (device{rank}/), prints LossMonitor lines on
// stdout (train.log{rank}), reports every step on the event stream and
// writes result.json.
//
// A rank that mpirun or srun started first takes its rank from the
// launcher's variables and prepares its directory and logs (launch.Attach),
// and reports its steps on the launcher's stdout instead.
func RunWorker(ctx context.Context, cfgPath string) (err error) {
	att, err := launch.Attach()
	if att != nil {
		defer reportExit(att, &err)
	}
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		if att != nil {
			return fmt.Errorf("worker config on host %s (the run directory must be on a filesystem every host sees): %w", att.Host, err)
		}
		return fmt.Errorf("worker config: %w", err)
	}
	var cfg WorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("worker config %s: %w", cfgPath, err)
	}
	rank, err := envInt("RANK_ID")
	if err != nil {
		return err
	}
	size, err := envInt("RANK_SIZE")
	if err != nil {
		return err
	}
	if _, err := envInt("DEVICE_ID"); err != nil {
		return err
	}
	events, err := openEventStream(rank, att)
	if err != nil {
		return err
	}
	if events != nil {
		defer func() {
			if err != nil {
				events.fail(err)
			}
		}()
	}
	// train.log{rank} is for people; the lead rank's lines (rank 0's, or
	// this host's first when rank 0 runs elsewhere) also go to the stage,
	// which shows them on the console.
	var say io.Writer = os.Stdout
	if events != nil && rank == cfg.LeadRank {
		say = io.MultiWriter(os.Stdout, events)
	}
	tc, err := trainerConfig(cfg, rank, size, say)
	if err != nil {
		return err
	}
	if events != nil {
		tc.OnStep = events.step
	}
	var comm *collective.Comm
	if cfg.With.Mode.Collective() {
		if comm, err = joinCollective(ctx, cfg, rank, &tc, say); err != nil {
			return fmt.Errorf("rank %d: join the collective: %w", rank, err)
		}
		defer comm.Close()
	}
	if usesEngine(cfg.With) {
		wireEngine(cfg, rank, size, comm, filepath.Dir(cfgPath), &tc)
	}
	res, err := trainer.Train(ctx, tc)
	if err != nil {
		leaveBlame(err)
		return err
	}
	if res.ResumedFrom != "" {
		fmt.Fprintf(say, "resumed from %s\n", res.ResumedFrom)
	}
	if cfg.StrategyFile != "" && rank == 0 {
		fmt.Fprintf(say, "strategy file: %s\n", cfg.StrategyFile)
	}
	out := WorkerResult{
		Rank: rank, Loss: float64(res.Loss), GlobalStep: res.GlobalStep, Seconds: res.Seconds,
		ImagesPerSec: res.ImagesPerSec, Accuracy: -1, ResumedFrom: res.ResumedFrom,
		PeakMemory: res.PeakDeviceMemory,
	}
	fmt.Fprintf(say, "device memory: peak %s (high-water mark) of %s\n", nn.Bytes(res.PeakDeviceMemory), nn.Bytes(res.DeviceMemory))
	if res.Checkpoint != "" {
		out.Checkpoint, _ = filepath.Abs(res.Checkpoint)
	}
	if !math.IsNaN(res.Accuracy) {
		out.Accuracy = res.Accuracy
		fmt.Fprintf(say, "accuracy: %.4f, eval loss: %.4f\n", res.Accuracy, res.EvalLoss)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile("result.json", data, 0o644)
}

// blameFile is the file a rank whose collective failed because of a peer
// leaves in its device directory, naming that peer, so that the launcher
// can tell a hung rank from the ranks that gave up waiting for it.
const blameFile = "blame.json"

// blame is the content of blameFile.
type blame struct {
	Rank  int    `json:"rank"` // the peer at fault
	Error string `json:"error"`
}

// leaveBlame writes blameFile when err is a collective failure attributed
// to a peer; it is best effort, as the rank is failing anyway. The file is
// read only after this process has exited, and a stale one is removed
// before the job starts, so it needs no atomic write: an fsync here would
// delay the end of a failing job.
func leaveBlame(err error) {
	var pe *collective.PeerError
	if !errors.As(err, &pe) {
		return
	}
	data, jerr := json.Marshal(blame{Rank: pe.Rank, Error: err.Error()})
	if jerr == nil {
		_ = os.WriteFile(blameFile, data, 0o644)
	}
}

// readBlame returns the peer that rank's blameFile in jobDir names.
func readBlame(jobDir string, rank launch.Rank) (int, bool) {
	data, err := os.ReadFile(filepath.Join(launch.DeviceDir(jobDir, rank.RankID), blameFile))
	if err != nil {
		return 0, false
	}
	var b blame
	if json.Unmarshal(data, &b) != nil || b.Rank < 0 {
		return 0, false
	}
	return b.Rank, true
}

// trainerConfig maps the stage's options to the trainer's for one rank of
// a job of size ranks; LossMonitor lines go to out.
func trainerConfig(cfg WorkerConfig, rank, size int, out io.Writer) (trainer.Config, error) {
	w := cfg.With
	threads := cfg.Threads
	if threads == 0 {
		threads = max(runtime.NumCPU()/size, 1)
	}
	init := cfg.InitFile
	if cfg.InitDir != "" {
		dir := filepath.Join(cfg.InitDir, fmt.Sprintf("device%d", rank), fmt.Sprintf("ckpt_%d", rank))
		var err error
		if init, err = ckpt.Latest(dir, w.Prefix); err != nil {
			return trainer.Config{}, fmt.Errorf("init: rank %d: %w", rank, err)
		}
	}
	eval := w.Eval == nil || *w.Eval
	// A split network evaluates on every rank together (each holds a
	// part of it); rank 0 reports.
	evalHere := eval && (rank == 0 || usesEngine(w) && w.Mode.Collective())
	tc := trainer.Config{
		DataDir: w.Data, Model: w.Model, Epochs: w.Epochs, BatchSize: w.BatchSize,
		LearningRate: w.LearningRate, Momentum: w.Momentum, NoMomentum: w.Momentum == 0,
		WeightDecay: w.WeightDecay, Schedule: w.LRSchedule, WarmupEpochs: w.WarmupEpochs,
		Seed: cfg.Seed, Threads: threads,
		NumShards: 1, ShardID: 0,
		CkptDir: fmt.Sprintf("ckpt_%d", rank), Prefix: w.Prefix,
		SaveCheckpointSteps: w.SaveCheckpointSteps, KeepCheckpointMax: w.KeepCheckpointMax,
		Init: init, Resume: true, Eval: evalHere, GradAccumulation: w.GradAccumulation,
		LogSteps: w.LogSteps, Log: out, ShuffleBuffer: w.ShuffleBuffer,
	}
	switch {
	case w.FullBatch:
		// Every device loads the whole global batch.
		tc.BatchSize = globalBatch(w, size)
	case w.Mode.ShardsData():
		tc.NumShards, tc.ShardID = size, rank
	}
	var err error
	if tc.DeviceMemory, err = parseMemory(w.DeviceMemory); err != nil {
		return trainer.Config{}, err
	}
	return tc, nil
}

func envInt(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, fmt.Errorf("%s is not set: this command runs as a rank process started by npu/train", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, errors.New(name + "=" + v + " is not a rank number")
	}
	return n, nil
}

// wireEngine makes tc train this rank's part of a network on the
// operator-parallel engine (npu/shard): the split modes, and models only
// the engine builds. Rank 0 writes the strategy file once the network is
// laid out; with integrated_save, rank 0 saves whole tensors and every rank
// resumes from its checkpoints.
func wireEngine(cfg WorkerConfig, rank, size int, comm *collective.Comm, jobDir string, tc *trainer.Config) {
	w := cfg.With
	sc := shard.Config{
		Model: w.Model, Mode: w.Mode, Strategy: cfg.Strategy, Devices: size, Rank: rank,
		BatchPerDevice: tc.BatchSize, FullBatch: w.FullBatch,
		GradientsMean: w.GradientsMean == nil || *w.GradientsMean,
		Seed:          cfg.Seed, Threads: tc.Threads,
	}
	if w.Mode.OneDevice() {
		sc.Devices, sc.Rank = 1, 0
	}
	if comm != nil {
		sc.Comm = comm
		tc.Rank = rank
	}
	// The engine reduces the gradients itself.
	tc.Reduce, tc.AllocGrads, tc.Broadcast = nil, nil, nil
	tc.Sharded = func(memory int64) (trainer.ShardedNet, error) {
		sc.Memory = memory
		net, err := shard.New(sc)
		if err != nil {
			return nil, err
		}
		if rank == 0 && cfg.StrategyFile != "" {
			f := strategyFile(net.OpLayouts(), net.Layouts())
			if err := parallel.WriteStrategyFile(cfg.StrategyFile, f, strategyFormat(cfg.StrategyFile)); err != nil {
				net.Close()
				return nil, fmt.Errorf("strategy file: %w", err)
			}
		}
		return net, nil
	}
	if comm != nil && (w.IntegratedSave == nil || *w.IntegratedSave) {
		tc.IntegratedSave = true
		tc.ResumeDir = filepath.Join(launch.DeviceDir(jobDir, 0), "ckpt_0")
	}
}
