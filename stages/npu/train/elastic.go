package train

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	engine "github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// on_failure values.
const (
	onFailureFail   = "fail"
	onFailureShrink = "shrink"
)

// defaultMaxShrinks is max_shrinks when on_failure is shrink and it is
// not given.
const defaultMaxShrinks = 3

// ShrinkField is the key of the events-log field that marks a shrink
// record (its value is "shrink"), with the fields ShrinkRecord names: the
// report finds shrinks by it. The console shows such a record's sentence
// without the fields, which it already says.
const ShrinkField = plugins.RecordField

// shrinks is how many times the stage may shrink: 0 unless on_failure is
// shrink.
func (w With) shrinks() int {
	if w.OnFailure != onFailureShrink {
		return 0
	}
	if w.MaxShrinks == nil {
		return defaultMaxShrinks
	}
	return *w.MaxShrinks
}

// faultFor returns the injected fault of the stage's job gen (0: its
// first; k: the one after the k-th shrink), or nil.
func faultFor(w With, gen int) *job.Fault {
	if w.Fault != nil && w.Fault.Shrink == gen {
		f := *w.Fault
		return &f
	}
	for _, f := range w.Faults {
		if f.Shrink == gen {
			return &f
		}
	}
	return nil
}

// faultField is the `with` key the faults were given under.
func faultField(w With) string {
	if len(w.Faults) > 0 {
		return "faults"
	}
	return "fault"
}

// shrink continues a job that failed with failure on fewer devices: it
// refuses unless a rank was lost, picks the newest checkpoint step every
// saving rank wrote and verified (the step the job's ranks would resume
// from), finds the device count the job continues on (job.ShrinkTo),
// reshards that checkpoint exactly to the new job's layout in
// <workdir>/shrink{gen}/resharded/ as ckpt/reshard does for a derived
// layout, and returns the job that resumes after it in
// <workdir>/shrink{gen}/. A refusal says why, after the job's own error.
func shrink(ctx context.Context, sc sdk.Context, prev jobSpec, ran ranJob, failure error, gen int) (jobSpec, error) {
	refuse := func(format string, args ...any) (jobSpec, error) {
		return jobSpec{}, fmt.Errorf("%w; on_failure: shrink did not continue: %s", failure, fmt.Sprintf(format, args...))
	}
	var rf *launch.RankFailure
	if !errors.As(failure, &rf) || !rf.Lost {
		return jobSpec{}, failure // a rank's own error: another device would not cure it
	}
	cfg, w := ran.cfg, prev.w
	if cfg.SpansHosts {
		return refuse("the job spans several servers")
	}
	failedAt := ran.ended
	if !ran.watch.failedAt.IsZero() {
		failedAt = ran.watch.failedAt
	}
	steps, err := stepsPerEpoch(cfg, prev.devices)
	if err != nil {
		return refuse("%v", err)
	}
	step, files, err := trainer.CommonCheckpoint(savingDirs(prev.dir, cfg, ran.ranks), cfg.Prefix, steps, nil)
	if err != nil {
		return refuse("choose a checkpoint: %v", err)
	}
	if step == 0 {
		return refuse("no step has a verified checkpoint of every saving rank (save_checkpoint_steps sets how often they save)")
	}
	layout := shrinkLayout(w, cfg, prev.devices)
	to, err := job.ShrinkTo(layout, prev.devices-1, func(n, batch int) error {
		c := cfg
		c.BatchSize = batch
		got, err := stepsPerEpoch(c, n)
		if err == nil && got != steps {
			err = fmt.Errorf("an epoch would have %d steps, not %d", got, steps)
		}
		return err
	})
	if err != nil {
		return refuse("%v", err)
	}
	if cfg.Mode == parallel.AutoParallel {
		// The new job searches its strategy when it is prepared, with all
		// of its inputs (threads too): the reshard must cut for that one.
		nextW := w
		nextW.BatchSize = to.BatchSize
		_, planned, err := prepare(nextW, to.Devices, nil)
		if err != nil {
			return refuse("plan the job on %d devices: %v", to.Devices, err)
		}
		to.Planned = planned
	}
	next := prev
	next.gen, next.devices = gen, to.Devices
	next.dir = filepath.Join(sc.WorkDir(), fmt.Sprintf("shrink%d", gen))
	next.rankTable = "" // n devices of this server, written in next.dir
	next.fault = faultFor(w, gen)
	if err := os.RemoveAll(next.dir); err != nil {
		return refuse("clear %s: %v", next.dir, err)
	}
	if err := os.MkdirAll(next.dir, 0o755); err != nil {
		return refuse("%v", err)
	}
	initDir := filepath.Join(next.dir, "resharded")
	resumed, err := globalStep(files[0])
	if err != nil {
		return refuse("%v", err)
	}
	sc.Info(fmt.Sprintf("on_failure: shrink: rank %d lost; resharding the checkpoint of step %d (global step %d) from %d to %d devices, batch %d per device",
		rf.Rank, step, resumed, prev.devices, to.Devices, to.BatchSize))
	if err := reshardForJob(ctx, w, cfg, files, to, initDir); err != nil {
		return refuse("reshard step %d to %d devices: %v", step, to.Devices, err)
	}
	next.w.BatchSize, next.w.Init, next.w.InitResumes = to.BatchSize, initDir, true
	if err := writeShrunkJob(next.dir, shrunkJob{Devices: to.Devices, BatchSize: to.BatchSize, ResumedStep: resumed}); err != nil {
		return refuse("%v", err)
	}
	rec := ShrinkRecord{
		LostRank: rf.Rank, Generation: gen, ResumedStep: resumed, FailedStep: ran.watch.lastStep,
		FromDevices: prev.devices, ToDevices: to.Devices,
		FromLayout: describeLayout(cfg, prev.devices, cfg.BatchSize, cfg.Strategy),
		ToLayout:   describeLayout(cfg, to.Devices, to.BatchSize, to.Planned.Strategy),
	}
	next.shrunk = &pendingShrink{rec: rec, failedAt: failedAt}
	return next, nil
}

// pendingShrink is a shrink whose record waits for the first step of the
// job it started, which ends the time lost.
type pendingShrink struct {
	once     sync.Once
	rec      ShrinkRecord
	failedAt time.Time
}

// report sends the record once: at the first step of the new job, or,
// when that job ended without a step (noStep), at its end, saying so.
func (p *pendingShrink) report(sc sdk.Context, noStep bool) {
	p.once.Do(func() {
		p.rec.NoStep = noStep
		p.rec.SecondsLost = time.Since(p.failedAt).Seconds()
		p.rec.emit(sc)
	})
}

// ShrinkRecord is a shrink as the events log records it: a log record
// whose fields are these, with ShrinkField "shrink". It is sent when the
// new job's first step has ended, so that SecondsLost is known.
type ShrinkRecord struct {
	LostRank   int // the rank that died or was declared dead
	Generation int // 1 for the stage's first shrink
	// ResumedStep is the global step of the checkpoint the new job
	// resumed after; FailedStep the last global step the lost job ended.
	ResumedStep, FailedStep int
	FromDevices, ToDevices  int
	FromLayout, ToLayout    string
	// SecondsLost is the wall time from the first rank's failure report
	// (else the end of the lost job) to the end of the new job's first
	// step, or to the new job's end when it ran no step (NoStep).
	SecondsLost float64
	NoStep      bool
}

func (r ShrinkRecord) emit(sc sdk.Context) {
	lost := fmt.Sprintf("%.1fs lost", r.SecondsLost)
	if r.NoStep {
		lost = fmt.Sprintf("the new job ended after %.1fs without a step", r.SecondsLost)
	}
	sc.Info(fmt.Sprintf("shrink %d: rank %d lost after global step %d; continued after step %d on %d devices (was %d): %s → %s; %d steps redone, %s",
		r.Generation, r.LostRank, r.FailedStep, r.ResumedStep, r.ToDevices, r.FromDevices, r.FromLayout, r.ToLayout, max(r.FailedStep-r.ResumedStep, 0), lost),
		ShrinkField, "shrink", "shrink", r.Generation, "lost_rank", r.LostRank,
		"resumed_step", r.ResumedStep, "failed_step", r.FailedStep,
		"from_devices", r.FromDevices, "to_devices", r.ToDevices,
		"from_layout", r.FromLayout, "to_layout", r.ToLayout,
		"steps_redone", max(r.FailedStep-r.ResumedStep, 0), "seconds_lost", r.SecondsLost, "no_step", r.NoStep)
}

// describeLayout says how a job of cfg's mode and pipeline is laid out,
// for the shrink record.
func describeLayout(cfg job.Config, devices, batch int, s parallel.Strategy) string {
	out := fmt.Sprintf("%s on %d devices, batch %d per device", cfg.Mode, devices, batch)
	if cfg.Pipelined() {
		per := devices / cfg.PipelineStages
		out += fmt.Sprintf(", %d pipeline stages of %d device", cfg.PipelineStages, per)
		if per > 1 {
			out += "s"
		}
	}
	if len(s) > 0 {
		var ops []string
		for _, name := range slices.Sorted(maps.Keys(s)) {
			ops = append(ops, fmt.Sprintf("%s %v", name, s[name]))
		}
		out += ", strategy " + strings.Join(ops, ", ")
	}
	return out
}

// shrunkJobFile is where a shrink leaves the layout of the job it started,
// in that job's directory, once the job's init is resharded: a later
// attempt of the stage (mspipe resume, retry) goes on in that job from its
// newest checkpoint, instead of starting over with the first job from
// older ones and then clearing the shrunk job's directory.
const shrunkJobFile = "job.json"

// shrunkJob is what shrunkJobFile holds.
type shrunkJob struct {
	Devices   int `json:"devices"`
	BatchSize int `json:"batch_size"`
	// ResumedStep is the global step of the checkpoint the job began after.
	ResumedStep int `json:"resumed_step"`
}

func writeShrunkJob(dir string, j shrunkJob) error {
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, shrunkJobFile), append(data, '\n'), 0o644)
}

// continuedJob returns the job the stage runs first: first, or, when an
// earlier attempt of an elastic stage shrank (its shrink{k}/ holds
// shrunkJobFile), the job of the last such shrink, which resumes in its
// own directory. It does not grow back to the cluster's devices.
func continuedJob(ctx context.Context, sc sdk.Context, first jobSpec) (jobSpec, error) {
	if first.w.OnFailure != onFailureShrink {
		return first, nil
	}
	last, found := first, false
	// Each shrink leaves fewer devices: at most devices-1 of them.
	for gen := 1; gen < first.devices; gen++ {
		dir := filepath.Join(sc.WorkDir(), fmt.Sprintf("shrink%d", gen))
		path := filepath.Join(dir, shrunkJobFile)
		data, err := userfile.ReadFile(ctx, path, 4<<10)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return first, fmt.Errorf("the earlier attempt's shrink %d: %w", gen, err)
		}
		var j shrunkJob
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return first, fmt.Errorf("%s: %w", path, err)
		}
		if j.Devices < 1 || j.Devices >= last.devices || j.BatchSize < 1 || j.ResumedStep < 1 {
			return first, fmt.Errorf("%s: devices %d, batch_size %d, resumed_step %d: not a shrink of a job on %d devices", path, j.Devices, j.BatchSize, j.ResumedStep, last.devices)
		}
		last.gen, last.devices, last.dir, last.rankTable = gen, j.Devices, dir, ""
		last.fault = faultFor(first.w, gen)
		last.w.BatchSize, last.w.Init, last.w.InitResumes = j.BatchSize, filepath.Join(dir, "resharded"), true
		found = true
	}
	if found {
		sc.Info(fmt.Sprintf("on_failure: shrink: an earlier attempt of this stage went on after shrink %d in %s, on %d devices with batch %d per device; this attempt continues there from its newest checkpoint (it does not grow back to %d devices)",
			last.gen, last.dir, last.devices, last.w.BatchSize, first.devices))
	}
	return last, nil
}

// globalStep is the optimizer's global_step a checkpoint file holds.
func globalStep(path string) (int, error) {
	tensors, err := ckpt.Read(path)
	if err != nil {
		return 0, err
	}
	for _, t := range tensors {
		if t.Name == "global_step" && t.DType == ckpt.DTypeInt32 && len(t.Data) == 4 {
			return int(int32(binary.LittleEndian.Uint32(t.Data))), nil
		}
	}
	return 0, fmt.Errorf("%s holds no global_step", path)
}

// shrinkLayout is the layout job.ShrinkTo plans a continuation of cfg's
// job with.
func shrinkLayout(w With, cfg job.Config, devices int) job.Layout {
	return job.Layout{
		Model: cfg.Model, Mode: cfg.Mode, Strategy: w.Strategy, BatchSize: cfg.BatchSize,
		Memory: cfg.DeviceMemory, Devices: devices, DatasetStrategy: cfg.DatasetStrategy,
		ParallelOptimizer: cfg.ParallelOptimizer, OptimizerShardSize: cfg.OptimizerShardSize,
		PipelineStages: cfg.PipelineStages, MicroSize: cfg.MicroSize,
		PipelineStage: cfg.PipelineStage, PipelineSchedule: cfg.PipelineSchedule,
	}
}

// stepsPerEpoch is the steps of an epoch of cfg's job on devices devices
// (rank 0's, as every rank has as many).
func stepsPerEpoch(cfg job.Config, devices int) (int, error) {
	tc, err := job.TrainerConfig(cfg, 0, devices, io.Discard)
	if err != nil {
		return 0, err
	}
	return trainer.StepsPerEpoch(tc)
}

// savingDirs are the checkpoint directories of the ranks of cfg's job
// that save: with integrated_save, a split job's rank 0 alone (it saves
// whole tensors, and every rank resumes from them), or with pipeline
// stages the first rank of each stage (its stage's whole tensors), in
// stage order; else every rank.
func savingDirs(jobDir string, cfg job.Config, ranks []launch.Rank) []string {
	if cfg.Engine() && cfg.Mode.Collective() && cfg.IntegratedSave {
		if !cfg.Pipelined() {
			return []string{ckptset.RankDir(jobDir, 0)}
		}
		per := len(ranks) / cfg.PipelineStages
		dirs := make([]string, cfg.PipelineStages)
		for s := range dirs {
			dirs[s] = ckptset.RankDir(jobDir, s*per)
		}
		return dirs
	}
	dirs := make([]string, len(ranks))
	for i, r := range ranks {
		dirs[i] = ckptset.RankDir(jobDir, r.RankID)
	}
	return dirs
}

// fixedStrategyMode is the mode a reshard target is derived in for a job
// of mode m whose strategy is already planned: auto_parallel's searched
// strategy is then given, as semi_auto_parallel's is.
func fixedStrategyMode(m parallel.Mode) parallel.Mode {
	if m == parallel.AutoParallel {
		return parallel.SemiAutoParallel
	}
	return m
}

// reshardForJob reshards the checkpoint set files (one per saving rank,
// or one whole file) to the layout of the job that continues on
// to.Devices devices, into outDir: the target of a job on the engine is
// derived as that job's ranks derive their layout (ckptset's TargetFor,
// what ckpt/reshard does given the next training's model); a whole
// model's replicas stay replicated (ckpt/reshard's devices rule).
func reshardForJob(ctx context.Context, w With, cfg job.Config, files []string, to job.Shrunk, outDir string) error {
	var set *ckptset.Set
	var in ckptset.Input
	var err error
	if cfg.Pipelined() {
		set, in, err = openPipelineSet(cfg, files)
	} else {
		strategy := ""
		if len(files) > 1 && cfg.StrategyFile != "" {
			strategy = cfg.StrategyFile
		}
		set, in, err = ckptset.Load(files, cfg.Prefix, strategy)
	}
	if err != nil {
		return err
	}
	var target engine.Target
	var layout *parallel.StrategyFile
	if cfg.Engine() {
		target, layout, err = set.TargetFor(ckptset.Job{
			Model: cfg.Model, Mode: fixedStrategyMode(cfg.Mode), Strategy: to.Planned.Strategy, Devices: to.Devices,
			BatchPerDevice: to.BatchSize, FullBatch: cfg.FullBatch,
			ParallelOptimizer: cfg.ParallelOptimizer, OptimizerShardSize: cfg.OptimizerShardSize,
			PipelineStages: cfg.PipelineStages, MicroSize: cfg.MicroSize, PipelineStage: cfg.PipelineStage,
		})
	} else {
		target, _, err = engine.DevicesTarget(set.Source, to.Devices, engine.IndivisibleRefuse)
		layout = set.StrategyForDevices(to.Devices)
	}
	if err != nil {
		return err
	}
	target.Files = ckptset.TargetFiles(target.Ranks, cfg.Prefix, in.Files[0])
	opt := engine.Options{MaxMemory: 512 << 20, ReplicatedRule: engine.RuleRank0, VerifyCRC: true, CRC: cfg.CRCCheck}
	_, err = ckptset.Reshard(ctx, set, in, target, layout, outDir, false, opt)
	return err
}

// openPipelineSet opens the checkpoint set of a pipeline job that failed
// (its stage's merged strategy file is written only when a job ends well):
// the per-stage strategy files its ranks wrote, merged, lay out either
// every rank's slices or, with integrated_save, the whole tensors the
// first rank of each stage saved (files in stage order).
func openPipelineSet(cfg job.Config, files []string) (*ckptset.Set, ckptset.Input, error) {
	in := ckptset.Input{Files: files}
	if cfg.StrategyFile == "" {
		return nil, in, fmt.Errorf("a pipeline job's set needs its stages' strategy files, and the job wrote none")
	}
	sf, err := job.ReadStageStrategies(cfg)
	if err != nil {
		return nil, in, err
	}
	var set *ckptset.Set
	if cfg.IntegratedSave && len(files) == cfg.PipelineStages {
		set, err = ckptset.OpenWholeStages(files, sf)
	} else {
		set, err = ckptset.Open(files, sf)
	}
	return set, in, err
}
