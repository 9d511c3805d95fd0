package train

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// execute runs the job: it resolves `with` into the rank job's config and
// plans the network before anything starts, sets up the collective, writes
// worker.json, runs this host's ranks and reports the lead rank's results.
// With on_failure: shrink, a job that loses a rank is continued on fewer
// devices (elastic.go), and the outputs are the last job's.
func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	req := sc.Request()
	spec := jobSpec{
		w: w, devices: max(req.Cluster.Devices, 1), dir: sc.WorkDir(),
		rankTable: req.Cluster.RankTable, fault: faultFor(w, 0),
	}
	spec, err := continuedJob(ctx, sc, spec)
	if err != nil {
		return nil, err
	}
	budget := w.shrinks()
	for gen := spec.gen; ; gen++ {
		ran, err := runJob(ctx, sc, spec)
		if spec.shrunk != nil {
			spec.shrunk.report(sc, true) // unless its first step did
		}
		if err == nil {
			return collectResults(spec.dir, ran.ranks, ran.cfg)
		}
		if gen >= budget || !ran.started || ctx.Err() != nil {
			return nil, err
		}
		next, serr := shrink(ctx, sc, spec, ran, err, gen+1)
		if serr != nil {
			return nil, serr
		}
		spec = next
	}
}

// jobSpec is one rank job of the stage: the stage's first, or one that
// continues it after a shrink.
type jobSpec struct {
	w       With // its batch_size, init and init_resumes are the job's own
	devices int
	dir     string // its work directory
	// rankTable is the cluster's, "" for one written in dir.
	rankTable string
	fault     *job.Fault
	// gen is the number of shrinks before it; shrunk is the shrink that
	// started it (nil for the stage's first job), reported when the job's
	// first step has ended.
	gen    int
	shrunk *pendingShrink
}

// ranJob is what a job left: whether its ranks started, its config, its
// ranks and what its event stream told.
type ranJob struct {
	started bool
	cfg     job.Config
	ranks   []launch.Rank
	watch   *jobWatch
	// ended is when the launcher returned.
	ended time.Time
}

// runJob runs one rank job of the stage in spec.dir.
func runJob(ctx context.Context, sc sdk.Context, spec jobSpec) (ranJob, error) {
	w, devices, jobDir := spec.w, spec.devices, spec.dir
	cfg, plan, err := prepare(w, devices, spec.fault)
	if err != nil {
		return ranJob{}, err
	}
	if cfg.StrategyFile, err = checkWrites(jobDir, w, devices); err != nil {
		return ranJob{}, err
	}
	rankTable, err := rankTableFile(spec.rankTable, jobDir, devices)
	if err != nil {
		return ranJob{}, err
	}
	if plan.Auto != nil {
		var table strings.Builder
		if err := plan.Auto.Format(&table); err == nil {
			sc.Info("auto_parallel chose (predicted by its cost model):\n" + strings.TrimRight(table.String(), "\n"))
		}
	}
	if cfg.StrategyFile != "" {
		_ = os.Remove(cfg.StrategyFile)
		for st := range cfg.PipelineStages {
			_ = os.Remove(job.StageStrategyFile(cfg.StrategyFile, st))
		}
	}
	ranks, err := placeRanks(sc, w, rankTable, jobDir, devices, &cfg)
	if err != nil {
		return ranJob{}, err
	}
	if cfg.InitFile, cfg.InitDir, err = resolveInit(w.Init); err != nil {
		return ranJob{}, err
	}
	cfgPath := filepath.Join(jobDir, job.ConfigFile)
	if err := job.WriteConfig(cfgPath, cfg); err != nil {
		return ranJob{}, err
	}
	if spec.gen == 0 {
		sc.Info(fmt.Sprintf("training %s in mode %s on %d device(s)", w.Model, w.Mode, devices))
	}
	ran := ranJob{started: true, cfg: cfg, ranks: ranks, watch: &jobWatch{}}
	if spec.shrunk != nil {
		ran.watch.first = func() { spec.shrunk.report(sc, false) }
	}
	err = runRanks(ctx, sc, w, cfg, launch.Job{
		Args: []string{job.Command, cfgPath}, Dir: jobDir,
		RankSize: devices, Ranks: ranks, RankTable: rankTable,
	}, ran.watch)
	ran.ended = time.Now()
	if err != nil {
		// The checkpoints a failed pipeline job leaves are resharded (by
		// hand, or by mspipe ckpt) from its directory as a finished job's
		// are, so they need the merged file beside them too. Only when
		// every stage's first rank wrote its file: a job that failed
		// before that saved nothing.
		if cfg.Pipelined() && cfg.StrategyFile != "" && stageStrategiesWritten(cfg) {
			if merr := mergeStageStrategies(sc, cfg, ranks, devices); merr != nil {
				sc.Warn(fmt.Sprintf("the failed job's strategy file: %v", merr))
			}
		}
		return ran, err
	}
	return ran, mergeStageStrategies(sc, cfg, ranks, devices)
}

// stageStrategiesWritten reports whether the first rank of every pipeline
// stage of cfg's job wrote its strategy file.
func stageStrategiesWritten(cfg job.Config) bool {
	for st := range cfg.PipelineStages {
		if fi, err := os.Stat(job.StageStrategyFile(cfg.StrategyFile, st)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// mergeStageStrategies writes a pipeline job's merged strategy file at
// cfg.StrategyFile once its ranks have ended (the stage's `strategy`
// output, what ckpt/integrate, ckpt/reshard and mspipe ckpt find beside
// the set), from the per-stage files the first rank of each stage wrote.
// A host that did not run every stage's first rank (a job across servers)
// cannot see every file: it says so and leaves the merge to the user.
func mergeStageStrategies(sc sdk.Context, cfg job.Config, ranks []launch.Rank, devices int) error {
	if !cfg.Pipelined() || cfg.StrategyFile == "" {
		return nil
	}
	here := map[int]bool{}
	for _, r := range ranks {
		here[r.RankID] = true
	}
	per := devices / cfg.PipelineStages
	for st := range cfg.PipelineStages {
		if !here[st*per] {
			sc.Warn(fmt.Sprintf("pipeline stage %d's first rank (%d) ran on another server: its strategy file is there, so no merged %s is written here; merge the stages' files with mspipe ckpt strategy merge",
				st, st*per, filepath.Base(cfg.StrategyFile)))
			return nil
		}
	}
	return job.MergeStageStrategies(cfg)
}

// prepare checks what only the run can check (the device count of a
// one-device mode, the data directory), resolves `with` into the rank
// job's config and plans the network: a strategy that cannot run on this
// cluster fails here, before any rank process starts, and auto_parallel's
// search runs here, once.
func prepare(w With, devices int, fault *job.Fault) (job.Config, *job.Planned, error) {
	if w.Mode.OneDevice() && devices != 1 {
		return job.Config{}, nil, fmt.Errorf("mode %s trains on one device, but the stage's cluster has %d: use mode %s, or set cluster: {devices: 1} on this stage", w.Mode, devices, parallel.DataParallel)
	}
	if fault != nil {
		if err := fault.Check(devices); err != nil {
			return job.Config{}, nil, &job.FieldError{Field: faultField(w), Err: err}
		}
	}
	if err := checkData(w.Data); err != nil {
		return job.Config{}, nil, err
	}
	cfg, err := resolve(w)
	if err != nil {
		return job.Config{}, nil, err
	}
	plan, err := job.Plan(job.Layout{
		Model: cfg.Model, Mode: cfg.Mode, Strategy: w.Strategy, BatchSize: cfg.BatchSize,
		Memory: cfg.DeviceMemory, Devices: devices, Threads: w.Threads, DatasetStrategy: cfg.DatasetStrategy,
		PipelineStages: w.PipelineStages, MicroSize: w.MicroSize,
		ParallelOptimizer: cfg.ParallelOptimizer, OptimizerShardSize: cfg.OptimizerShardSize,
	})
	if err != nil {
		return job.Config{}, nil, err
	}
	cfg.Strategy = plan.Strategy
	cfg.Fault = fault
	return cfg, plan, nil
}

// resolve turns `with` into the rank job's config, every default and unit
// resolved: device memory in bytes, the collective's transport and
// timeout. The strategy, the collective endpoint, the init checkpoint and
// the strategy file are the run's, set by execute.
func resolve(w With) (job.Config, error) {
	memory, err := job.ParseDeviceMemory(w.DeviceMemory)
	if err != nil {
		return job.Config{}, err
	}
	transport := collective.TransportAuto
	if w.CollectiveTransport != "" {
		if transport, err = collective.ParseTransport(w.CollectiveTransport); err != nil {
			return job.Config{}, &job.FieldError{Field: "collective_transport", Err: err}
		}
	}
	timeout := job.DefaultCollectiveTimeout
	if w.CollectiveTimeout > 0 {
		timeout = time.Duration(w.CollectiveTimeout)
	}
	return job.Config{
		Model: w.Model, Mode: w.Mode, DeviceMemory: memory,
		// dataset_strategy "full_batch" is full_batch: true.
		FullBatch:         w.FullBatch || w.DatasetStrategy.Name == parallel.DatasetFullBatch,
		DatasetStrategy:   w.DatasetStrategy.Splits,
		ParallelOptimizer: w.ParallelOptimizer, OptimizerShardSize: w.OptimizerShardSize,
		DataDir: w.Data, Epochs: w.Epochs, BatchSize: w.BatchSize, GradAccumulation: w.GradAccumulation,
		LearningRate: w.LearningRate, Momentum: w.Momentum, WeightDecay: w.WeightDecay,
		Schedule: w.LRSchedule, WarmupEpochs: w.WarmupEpochs, Seed: uint64(w.Seed),
		ShuffleBuffer: w.ShuffleBuffer, Threads: w.Threads,
		Eval: w.Eval == nil || *w.Eval, LogSteps: w.LogSteps,
		Prefix: w.Prefix, SaveCheckpointSteps: w.SaveCheckpointSteps, KeepCheckpointMax: w.KeepCheckpointMax, CRCCheck: w.CRCCheck,
		IntegratedSave: w.IntegratedSave == nil || *w.IntegratedSave,
		AsyncSave:      w.AsyncSave, ExceptionSave: w.ExceptionSave, InitResumes: w.InitResumes,
		PipelineStages: w.PipelineStages, MicroSize: w.MicroSize,
		PipelineSchedule: w.PipelineSchedule, PipelineStage: w.PipelineStage,
		GradientsMean:      w.GradientsMean == nil || *w.GradientsMean,
		ParameterBroadcast: w.ParameterBroadcast,
		CollectiveTimeout:  timeout, Transport: job.Transport(transport),
	}, nil
}

// rankTableFile is the cluster's rank table, or one written in jobDir for
// devices devices on this host when the cluster names none.
func rankTableFile(given, jobDir string, devices int) (string, error) {
	if given != "" {
		return given, nil
	}
	return launch.LocalRankTable(jobDir, devices)
}

// placeRanks returns the ranks to start here, and sets up the collective
// of a mode that has one: the ranks' ports and the job secret, and, with
// the local launcher on a rank table that spans servers, which ranks are
// this host's.
func placeRanks(sc sdk.Context, w With, rankTable, jobDir string, devices int, cfg *job.Config) ([]launch.Rank, error) {
	ranks := make([]launch.Rank, devices)
	for i := range ranks {
		ranks[i] = launch.Rank{RankID: i, DeviceID: i % 8}
	}
	if !w.Mode.Collective() {
		return ranks, nil
	}
	t, problems, err := ranktable.Load(rankTable)
	if err != nil {
		return nil, err
	}
	if problems.HasErrors() {
		return nil, fmt.Errorf("rank table %s: %w", rankTable, problems.Err())
	}
	if w.Launcher != launch.Local {
		// mpirun or srun starts every rank, on every server, from here.
		if err := externalCollective(w, t, jobDir, cfg); err != nil {
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
		ranks = ranks[:0]
		for _, r := range share.Ranks {
			ranks = append(ranks, launch.Rank{RankID: r.RankID, DeviceID: r.DeviceID})
		}
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
	return ranks, nil
}

// resolveInit says whether with.init is a checkpoint file every rank
// starts from or a directory with one per rank.
func resolveInit(init string) (file, dir string, err error) {
	if init == "" {
		return "", "", nil
	}
	st, err := os.Stat(init)
	if err != nil {
		return "", "", fmt.Errorf("init: %w", err)
	}
	if st.IsDir() {
		return "", init, nil
	}
	return init, "", nil
}

// runRanks starts rj's ranks (this executable with job.Command), relays
// their events while they run and waits for them; a failure names what the
// failed ranks reported.
func runRanks(ctx context.Context, sc sdk.Context, w With, cfg job.Config, rj launch.Job, watch *jobWatch) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rj.Path = self
	for _, r := range rj.Ranks {
		_ = os.Remove(filepath.Join(launch.DeviceDir(rj.Dir, r.RankID), job.ResultFile))
		_ = os.Remove(filepath.Join(launch.DeviceDir(rj.Dir, r.RankID), job.BlameFile))
	}
	events, sink, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("event stream: %w", err)
	}
	defer events.Close()
	relayed := make(chan error, 1)
	failures := map[int]string{} // read once relayed has answered
	go func() { relayed <- relayWatched(events, sc, rj.RankSize, cfg.LeadRank, failures, watch) }()
	rj.ExtraFiles = []*os.File{sink}
	// Only the processes started here hold the pipe, so only they are
	// told its number (worker.json may be reused by hand).
	rj.Env = []string{fmt.Sprintf("%s=%d", job.EnvEventFD, job.EventFD)}
	if w.Mode.Collective() {
		// Let the other ranks see a dead peer in their collectives (and say
		// so in their logs) before stopping them.
		rj.PeerFailWait = cfg.CollectiveTimeout + 5*time.Second
		// A rank that every other one blames (it hangs) is stopped at once.
		rj.Blame = func(r launch.Rank) (int, bool) { return job.ReadBlame(launch.DeviceDir(rj.Dir, r.RankID)) }
	}
	var runErr error
	if w.Launcher == launch.Local {
		runErr = launch.Run(ctx, rj)
	} else {
		runErr = runExternal(ctx, sc, w, rj)
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
		if err := job.RemoveShmLeftovers(rj.RankTable, cfg); err != nil {
			sc.Warn(fmt.Sprintf("remove shared memory left by the ranks: %v", err))
		}
	}
	if runErr != nil {
		return withReportedFailures(runErr, failures)
	}
	return nil
}

// collectResults reads the results of this host's ranks: the lead rank's
// (rank 0's when it runs here) become the outputs, with the images per
// second of them all and the peak memory of any.
func collectResults(jobDir string, ranks []launch.Rank, cfg job.Config) (map[string]any, error) {
	ips := 0.0
	var peak int64
	var lead job.Result
	for _, r := range ranks {
		res, err := job.ReadResult(launch.DeviceDir(jobDir, r.RankID))
		if errors.As(err, new(*fs.PathError)) {
			return nil, fmt.Errorf("rank %d left no result: %w", r.RankID, err)
		}
		if err != nil {
			return nil, fmt.Errorf("rank %d %w", r.RankID, err)
		}
		ips += res.ImagesPerSec
		peak = max(peak, res.PeakMemory)
		if r.RankID == cfg.LeadRank {
			lead = res
		}
	}
	return map[string]any{
		"checkpoints":        jobDir,
		"checkpoint":         lead.Checkpoint,
		"loss":               lead.Loss,
		"accuracy":           lead.Accuracy,
		"global_step":        lead.GlobalStep,
		"wall_time":          lead.Seconds,
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

// strategyOutput returns path when it was written (by rank 0, or merged
// from a pipeline job's stages), else "".
func strategyOutput(path string) string {
	if path == "" {
		return ""
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}
