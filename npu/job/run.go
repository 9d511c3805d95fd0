package job

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

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
)

// Run is the body of one rank process: it reads the job's Config at
// cfgPath, takes its rank from RANK_ID/RANK_SIZE/DEVICE_ID as the seeds'
// training scripts do, trains with checkpoints in ckpt_{rank}/ of the
// current directory (device{rank}/), prints LossMonitor lines on stdout
// (train.log{rank}), reports every step on the event stream and writes
// ResultFile.
//
// A rank that mpirun or srun started first takes its rank from the
// launcher's variables and prepares its directory and logs (launch.Attach),
// and reports its steps on the launcher's stdout instead.
func Run(ctx context.Context, cfgPath string) error {
	return RunTo(ctx, cfgPath, os.Stdout)
}

// RunTo is Run with the rank's train.log lines going to stdout instead of
// os.Stdout: a test wraps it to act on a line before training goes on (a
// crash right after a given step's LossMonitor line).
func RunTo(ctx context.Context, cfgPath string, stdout io.Writer) (err error) {
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
	cfg, err := decodeConfig(raw, cfgPath)
	if err != nil {
		return err
	}
	rank, size, err := rankFromEnv()
	if err != nil {
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
	say := stdout
	if events != nil && rank == cfg.LeadRank {
		say = io.MultiWriter(stdout, events)
	}
	res, err := train(ctx, cfg, rank, size, filepath.Dir(cfgPath), events, say)
	if err != nil {
		return err
	}
	return writeResult(cfg, rank, res, say)
}

// rankFromEnv reads the rank and the job's size from the seeds'
// variables, and checks DEVICE_ID.
func rankFromEnv() (rank, size int, err error) {
	if rank, err = envInt("RANK_ID"); err != nil {
		return 0, 0, err
	}
	if size, err = envInt("RANK_SIZE"); err != nil {
		return 0, 0, err
	}
	if _, err := envInt("DEVICE_ID"); err != nil {
		return 0, 0, err
	}
	return rank, size, nil
}

// train runs rank's part of the job: it joins the collective when the
// mode has one, wires the engine when the job runs on it, and trains.
func train(ctx context.Context, cfg Config, rank, size int, jobDir string, events *eventWriter, say io.Writer) (*trainer.Result, error) {
	tc, err := TrainerConfig(cfg, rank, size, say)
	if err != nil {
		return nil, err
	}
	if events != nil {
		tc.OnStep = events.step
		if rank == 0 { // every rank has the same figures: one reports them
			tc.OnEval = events.eval
		}
	}
	if tc.Fault, err = trainerFault(cfg.Fault, rank, say); err != nil {
		return nil, err
	}
	var comm *collective.Comm
	var cc collective.Config
	if cfg.Mode.Collective() {
		if comm, cc, err = joinCollective(ctx, cfg, rank, &tc, say); err != nil {
			return nil, fmt.Errorf("rank %d: join the collective: %w", rank, err)
		}
		defer comm.Close()
	}
	var pipe *pipeComms
	if cfg.Pipelined() {
		if comm == nil {
			return nil, fmt.Errorf("rank %d: pipeline stages in mode %s, which has no collective", rank, cfg.Mode)
		}
		if pipe, err = joinPipeline(ctx, cfg, cc, comm, rank, size); err != nil {
			return nil, fmt.Errorf("rank %d: join the pipeline: %w", rank, err)
		}
		defer pipe.Close()
		fmt.Fprintf(say, "pipeline: rank %d is rank %d of stage %d of %d (%s, %d micro-batches)\n",
			rank, pipe.rank, pipe.spec.Stage, pipe.spec.Stages, pipe.spec.Schedule, pipe.spec.Micro)
	}
	if cfg.Engine() {
		wireEngine(cfg, rank, size, comm, pipe, jobDir, &tc)
	}
	res, err := trainer.Train(ctx, tc)
	if err != nil {
		leaveBlame(err)
		return nil, err
	}
	return res, nil
}

// writeResult reports the rank's result on say and in ResultFile.
func writeResult(cfg Config, rank int, res *trainer.Result, say io.Writer) error {
	if res.ResumedFrom != "" {
		fmt.Fprintf(say, "resumed from %s\n", res.ResumedFrom)
	}
	if cfg.StrategyFile != "" && rank == 0 {
		fmt.Fprintf(say, "strategy file: %s\n", cfg.StrategyFile)
	}
	out := Result{
		Rank: rank, Loss: float64(res.Loss), GlobalStep: res.GlobalStep, Seconds: res.Seconds,
		ImagesPerSec: res.ImagesPerSec, Accuracy: -1, ResumedFrom: res.ResumedFrom,
		PeakMemory: res.PeakDeviceMemory, PeakSaveStaging: res.PeakSaveStaging, SaveBlocked: res.SaveBlocked.Seconds(),
	}
	rss, cpu := processUsage()
	out.PeakHostMemory, out.CPUSeconds = rss, cpu.Seconds()
	if res.Saves > 0 {
		how := "synchronous"
		if cfg.AsyncSave {
			how = fmt.Sprintf("async_save, %.2fs of it waiting for the previous write", res.SaveWait.Seconds())
		}
		fmt.Fprintf(say, "checkpoints: %d saves held training up %.2fs in all (%s)\n", res.Saves, res.SaveBlocked.Seconds(), how)
	}
	fmt.Fprintf(say, "device memory: peak %s (high-water mark) of %s\n", bytesize.Format(res.PeakDeviceMemory), bytesize.Format(res.DeviceMemory))
	if cfg.AsyncSave {
		fmt.Fprintf(say, "async_save: host memory staging checkpoints: peak %s (one checkpoint of this rank at most)\n", bytesize.Format(res.PeakSaveStaging))
	}
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
	return atomicfile.WriteFile(ResultFile, data, 0o644)
}

// TrainerConfig is what rank of a job of size ranks gives the trainer,
// before the collective and the engine are wired in; LossMonitor lines go
// to out.
func TrainerConfig(cfg Config, rank, size int, out io.Writer) (trainer.Config, error) {
	threads := cfg.Threads
	if threads == 0 {
		threads = max(runtime.NumCPU()/size, 1)
	}
	init := cfg.InitFile
	if cfg.InitDir != "" {
		// A resharded set is read as its manifest lists it (stale files
		// refused); a training's set by its newest checkpoints.
		var err error
		if init, err = ckptset.RankFile(cfg.InitDir, rank, cfg.Prefix); err != nil {
			return trainer.Config{}, fmt.Errorf("init: rank %d: %w", rank, err)
		}
	}
	// A split network evaluates on every rank together (each holds a
	// part of it); rank 0 reports.
	evalHere := cfg.Eval && (rank == 0 || cfg.Engine() && cfg.Mode.Collective())
	// After each epoch every rank of a job that trains together evaluates
	// (one rank alone would keep its peers waiting in their next
	// collective): each scores a part of the test set (a split network's
	// Predict gives the logits of the rank's own batch) and the ranks add
	// up their counts.
	evalEach := cfg.Eval && cfg.Epochs > 1 && (evalHere || cfg.Mode.Collective())
	evalPart, evalParts := 0, 1
	if evalEach && cfg.Mode.Collective() {
		evalPart, evalParts = rank, size
	}
	tc := trainer.Config{
		DataDir: cfg.DataDir, Model: cfg.Model, Epochs: cfg.Epochs, BatchSize: cfg.BatchSize,
		LearningRate: cfg.LearningRate, Momentum: cfg.Momentum, NoMomentum: cfg.Momentum == 0,
		WeightDecay: cfg.WeightDecay, Schedule: cfg.Schedule, WarmupEpochs: cfg.WarmupEpochs,
		Seed: cfg.Seed, Threads: threads,
		NumShards: 1, ShardID: 0,
		CkptDir: fmt.Sprintf("ckpt_%d", rank), Prefix: cfg.Prefix,
		SaveCheckpointSteps: cfg.SaveCheckpointSteps, KeepCheckpointMax: cfg.KeepCheckpointMax, CRCCheck: cfg.CRCCheck,
		AsyncSave: cfg.AsyncSave, ExceptionSave: cfg.ExceptionSave,
		Init: init, InitResumes: cfg.InitResumes, Resume: true, Eval: evalHere, GradAccumulation: cfg.GradAccumulation,
		EvalEachEpoch: evalEach, EvalPart: evalPart, EvalParts: evalParts,
		LogSteps: cfg.LogSteps, Log: out, ShuffleBuffer: cfg.ShuffleBuffer,
		DeviceMemory: cfg.DeviceMemory,
	}
	switch {
	case cfg.Pipelined():
		// Every rank loads its stage group's whole global batch: the first
		// stage reads the images of each micro-batch, the last its labels.
		tc.BatchSize = cfg.BatchSize * size / cfg.PipelineStages
	case cfg.FullBatch:
		// Every device loads the whole global batch.
		tc.BatchSize = GlobalBatch(cfg.Mode, cfg.BatchSize, size)
	case cfg.DatasetStrategy != nil:
		// Each device loads its shard of the samples (the batch split) and
		// of each image only its window.
		ds, err := shard.DatasetShard(cfg.DatasetStrategy, size, rank)
		if err != nil {
			return trainer.Config{}, fmt.Errorf("dataset_strategy: %w", err)
		}
		tc.NumShards, tc.ShardID = ds.Shards, ds.ShardID
		tc.ImageWindow = data.Window{Offset: ds.Offset, Shape: ds.Shape}
	case cfg.Mode.ShardsData():
		tc.NumShards, tc.ShardID = size, rank
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

// reportExit tells the launcher's reader how the rank ended, also when it
// panics (the panic goes on, to train.log).
func reportExit(att *launch.Attached, err *error) {
	if r := recover(); r != nil {
		att.Exit(fmt.Errorf("panic: %v", r))
		panic(r)
	}
	att.Exit(*err)
}
