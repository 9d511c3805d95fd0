package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/tensor"
)

// Train runs one device's training job. It returns when the epochs are
// done, MaxSteps is reached, or ctx is cancelled (then with ctx's error,
// after the checkpoints written so far are complete).
func Train(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	j, err := setUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer j.net.Close()
	err = j.loop(ctx)
	// An asynchronous write may still be in flight: the result names a
	// checkpoint only once it is committed, and no write outlives Train.
	if j.mc != nil {
		if _, werr := j.mc.Wait(); werr != nil {
			err = errors.Join(err, werr)
		}
		j.res.Checkpoint = j.mc.Latest()
		j.res.PeakSaveStaging = j.mc.PeakStaged()
	}
	if err != nil {
		return j.res, err
	}
	return j.res, j.finish(ctx)
}

// training is a job set up: the data, the network and its optimizer,
// the checkpoints, and the global step training starts from.
type training struct {
	cfg   Config
	pipe  *data.Pipeline
	accum int // micro-batches per step
	steps int // steps per epoch
	net   network
	model *nn.Model // the whole model, when it is not sharded
	opt   *optim.Momentum
	mc    *ckpt.ModelCheckpoint // nil when no checkpoints are saved
	every int                   // steps between saves
	// stagedBytes is the tensor data of the last snapshot saved, set
	// before its write starts (a fault during a save kills half-way).
	stagedBytes int64
	start       int // this job's steps already done
	// base is the optimizer's global step before this job's first step:
	// an init checkpoint's count, which this job continues (as MindSpore's
	// global_step parameter does), while its epochs, steps and file names
	// count from 1 as a new Model.train does.
	base int
	res  *Result
	// lastEpoch is the 1-based epoch of the last step run.
	lastEpoch int
}

// setUp prepares cfg's job: the data pipeline, the network on its device
// with every buffer counted against the device memory, the optimizer, and
// the starting point (an init checkpoint, a resumed run, rank 0's
// broadcast parameters). On error nothing is left open.
func setUp(ctx context.Context, cfg Config) (_ *training, err error) {
	j := &training{cfg: cfg}
	if err := j.openData(); err != nil {
		return nil, err
	}
	if err := j.buildNetwork(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			j.net.Close()
		}
	}()
	if err := j.newOptimizer(); err != nil {
		return nil, err
	}
	j.res = &Result{StepsPerEpoch: j.steps, Accuracy: math.NaN(), EvalLoss: math.NaN()}
	if err := j.restoreStart(ctx); err != nil {
		return nil, err
	}
	return j, nil
}

// openData opens the training split as cfg's shard sees it and counts the
// steps of an epoch.
func (j *training) openData() error {
	cfg := j.cfg
	set, err := data.ReadDir(cfg.DataDir, data.SplitTrain)
	if err != nil {
		return err
	}
	dcfg := data.SeedConfig(cfg.NumShards, cfg.ShardID, cfg.Seed)
	dcfg.BatchSize = cfg.BatchSize
	dcfg.Window = cfg.ImageWindow
	switch {
	case cfg.ShuffleBuffer < 0:
		dcfg.ShuffleBuffer = 0
	case cfg.ShuffleBuffer > 0:
		dcfg.ShuffleBuffer = cfg.ShuffleBuffer
	}
	if cfg.NoAugment {
		dcfg.RandomCrop, dcfg.RandomFlip = false, false
	}
	if j.pipe, err = data.NewPipeline(set, dcfg); err != nil {
		return err
	}
	// With gradient accumulation a step takes accum micro-batches; the
	// micro-batches left over at the end of an epoch are dropped, as
	// drop_remainder drops a partial batch.
	j.accum = max(cfg.GradAccumulation, 1)
	if j.steps = j.pipe.StepsPerEpoch() / j.accum; j.steps == 0 {
		return fmt.Errorf("%w: %d training images on this shard are fewer than one step of %d×%d", ErrConfig, j.pipe.SamplesPerEpoch(), j.accum, cfg.BatchSize)
	}
	return nil
}

// buildNetwork builds the network on its device, this rank's part of a
// sharded one or the whole model, and reserves the input batch; a whole
// model's gradients go where AllocGrads puts them. On error the network
// is closed.
func (j *training) buildNetwork(ctx context.Context) (err error) {
	cfg := j.cfg
	if cfg.Sharded != nil {
		if cfg.Reduce != nil || cfg.AllocGrads != nil || cfg.Broadcast != nil {
			return fmt.Errorf("%w: a sharded network does its own communication", ErrConfig)
		}
		sn, err := cfg.Sharded(cfg.DeviceMemory)
		if err != nil {
			return err
		}
		j.net = &shardedNet{ShardedNet: sn, name: cfg.Model}
	} else {
		m, err := newModel(cfg.Model, nn.ResNetConfig{Seed: cfg.Seed, Threads: cfg.Threads, Memory: cfg.DeviceMemory})
		if err != nil {
			return err
		}
		j.model = m
		j.net = &wholeModel{Model: m, loss: nn.NewSoftmaxCrossEntropyExpand()}
	}
	defer func() {
		if err != nil {
			j.net.Close()
		}
	}()
	c, h, w := j.pipe.ImageShape()
	if err := j.net.Device().Reserve(fmt.Sprintf("input batch float32[%d %d %d %d]", cfg.BatchSize, c, h, w), 4*int64(cfg.BatchSize*c*h*w)); err != nil {
		return err
	}
	if cfg.AllocGrads != nil {
		buf, err := cfg.AllocGrads(ctx, len(j.model.Grads()))
		if err != nil {
			return fmt.Errorf("gradient memory: %w", err)
		}
		if err := j.model.SetGradBuffer(buf); err != nil {
			return err
		}
	}
	return nil
}

// newOptimizer makes the Momentum optimizer over the learning rate
// schedule, and reserves its moments (and the accumulated gradients) on
// the device.
func (j *training) newOptimizer() error {
	cfg := j.cfg
	lrs, err := optim.LearningRates(optim.Schedule{
		Mode: cfg.Schedule, LRMax: cfg.LearningRate, WarmupEpochs: cfg.WarmupEpochs,
		TotalEpochs: cfg.Epochs, StepsPerEpoch: j.steps,
	})
	if err != nil {
		return err
	}
	if j.opt, err = optim.NewMomentum(j.net.TrainableParams(), optim.MomentumConfig{
		LearningRates: lrs, Momentum: float32(cfg.Momentum), WeightDecay: float32(cfg.WeightDecay),
	}); err != nil {
		return err
	}
	// Momentum keeps one moment per gradient element on the device.
	gradBytes := 4 * int64(gradLen(j.net.TrainableParams()))
	if err := j.net.Device().Reserve("optimizer moments", gradBytes); err != nil {
		return err
	}
	if j.accum > 1 {
		if err := j.net.Device().Reserve("gradient accumulation", gradBytes); err != nil {
			return err
		}
	}
	return nil
}

// restoreStart sets where training starts: the init checkpoint's values,
// then the newest checkpoint of an interrupted run when resuming, or on a
// fresh start rank 0's parameters when they are broadcast. It prepares the
// checkpoints the job saves.
func (j *training) restoreStart(ctx context.Context) error {
	cfg := j.cfg
	restoreOpts := func(o RestoreOptions) RestoreOptions {
		if sn, ok := j.net.(*shardedNet); ok {
			o.Layouts, o.Rank = sn.Layouts(), cfg.Rank
			if pb, ok := sn.ShardedNet.(pieceBoxer); ok {
				o.Pieces = pb.PieceBoxes()
			}
		}
		return o
	}
	if cfg.Init != "" {
		tensors, err := ckpt.Read(cfg.Init)
		if err != nil {
			return fmt.Errorf("init: %w", err)
		}
		opts := restoreOpts(RestoreOptions{Optimizer: j.opt, OwnHyperparameters: true, RequireOptimizer: cfg.InitResumes,
			Recut: func(name string) { j.res.Recut = append(j.res.Recut, name) }})
		if err := Restore(j.net, tensors, opts); err != nil {
			return fmt.Errorf("init from %s: %w", cfg.Init, err)
		}
		sort.Strings(j.res.Recut)
		if cfg.Log != nil && opts.Layouts != nil {
			if len(j.res.Recut) == 0 {
				fmt.Fprintf(cfg.Log, "init: %s is in this rank's layout: no tensor re-cut\n", cfg.Init)
			} else {
				fmt.Fprintf(cfg.Log, "init: re-cut %d whole tensors of %s to this rank's slices (reshard to this job's layout to skip it): %s\n",
					len(j.res.Recut), cfg.Init, strings.Join(j.res.Recut, ", "))
			}
		}
		j.base = j.opt.GlobalStep()
		if cfg.InitResumes {
			if err := j.resumeAtInit(); err != nil {
				return err
			}
		}
		j.opt.ScheduleFrom(j.base)
	}
	if cfg.CkptDir != "" {
		every := cfg.SaveCheckpointSteps
		if every == 0 {
			every = j.steps // once per epoch
		}
		// Every file gets a sidecar digest, so a damaged checkpoint is
		// found on resume instead of training on, while the file stays what
		// MindSpore writes (with a trailer only when asked for).
		j.every = every
		write := ckpt.WriteOptions{CRC: cfg.CRCCheck, Digest: true}
		if f := cfg.Fault; f != nil && f.DuringSave {
			write.Progress = j.faultInSave
		}
		var err error
		if j.mc, err = ckpt.NewModelCheckpoint(cfg.Prefix, cfg.CkptDir, ckpt.CheckpointConfig{
			SaveCheckpointSteps: every, KeepCheckpointMax: cfg.KeepCheckpointMax, ReusePrefix: cfg.Resume,
			Write: write, AsyncSave: cfg.AsyncSave,
		}); err != nil {
			return err
		}
	}
	if cfg.Resume {
		latest, tensors, err := resumePoint(ctx, cfg, j.mc.Prefix(), j.steps)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if latest != "" {
			if err := Restore(j.net, tensors, restoreOpts(RestoreOptions{Optimizer: j.opt, RequireOptimizer: true})); err != nil {
				return fmt.Errorf("resume from %s: %w", latest, err)
			}
			// The checkpoint's count includes the init's steps.
			j.start = j.opt.GlobalStep() - j.base
			if j.start < 0 || j.start > cfg.Epochs*j.steps {
				return fmt.Errorf("resume from %s: its global_step %d does not continue the init's %d within this job's %d steps", latest, j.opt.GlobalStep(), j.base, cfg.Epochs*j.steps)
			}
			j.mc.ResumeAt(j.start)
			j.res.ResumedFrom = latest
		}
	}
	if j.start > 0 && j.res.ResumedFrom == "" && j.mc != nil {
		// InitResumes: the saves go on counting from the init's step.
		j.mc.ResumeAt(j.start)
	}
	if cfg.Broadcast != nil && j.start == 0 && j.model != nil {
		if err := cfg.Broadcast(ctx, j.model.Values()); err != nil {
			return fmt.Errorf("parameter broadcast: %w", err)
		}
	}
	return nil
}

// resumeAtInit sets the start of a job whose init is a checkpoint of
// this same training (Config.InitResumes): the step its file name gives is
// this job's steps already done, and the global step before them is the
// one the training began at.
func (j *training) resumeAtInit() error {
	cfg := j.cfg
	_, epoch, inEpoch, ok := ckpt.ParseFileName(filepath.Base(cfg.Init))
	if !ok {
		return fmt.Errorf("init %s: its name does not say where the training was ({prefix}-{epoch}_{step}.ckpt), which a resuming init needs", cfg.Init)
	}
	done := (epoch-1)*j.steps + inEpoch
	if inEpoch > j.steps || done > cfg.Epochs*j.steps || done > j.base {
		return fmt.Errorf("init %s: epoch %d step %d (global step %d) is not a step of this job's %d epochs of %d steps", cfg.Init, epoch, inEpoch, j.base, cfg.Epochs, j.steps)
	}
	j.start, j.base = done, j.base-done
	j.res.ResumedFrom = ""
	return nil
}

// loop trains from the start step to the last one: each step's
// micro-batches, the gradient reduction, the update, the LossMonitor
// line, the checkpoint and the step report. It stops at the first error
// or when ctx is cancelled, with the last complete checkpoint saved.
func (j *training) loop(ctx context.Context) error {
	cfg, steps, accum := j.cfg, j.steps, j.accum
	loader := j.pipe.NewLoader()
	batch := j.pipe.NewBatch()
	total := cfg.Epochs * steps
	if cfg.MaxSteps > 0 {
		total = min(total, j.start+cfg.MaxSteps)
	}
	var acc [][]float32 // gradient sums over the micro-batches of a step
	if accum > 1 {
		trainable := j.net.TrainableParams()
		acc = make([][]float32, len(trainable))
		for i, p := range trainable {
			acc[i] = make([]float32, p.Grad.Len())
		}
	}
	if err := j.checkFault(total); err != nil {
		return err
	}
	// exception_save needs the state before a failing step: the optimizer
	// and the trainable parameters change only in the update, after every
	// point a step can fail, but BatchNorm's moving statistics change in
	// the forward pass, so they are kept aside before each step.
	var before *movingState
	if cfg.ExceptionSave && j.mc != nil {
		before = newMovingState(j.net.Params())
	}
	// One host copy serves every save: a synchronous save has written it
	// before the next step, an asynchronous one is waited for before the
	// next snapshot (ckpt.CheckpointConfig.AsyncSave).
	var staging []ckpt.Tensor
	take := func() ([]ckpt.Tensor, error) { return snapshotInto(staging, j.net, j.opt) }
	if sn, ok := j.net.(*shardedNet); ok && cfg.IntegratedSave {
		take = func() ([]ckpt.Tensor, error) { return integratedSnapshot(ctx, sn, j.opt) }
	}
	snapshot := func() ([]ckpt.Tensor, error) {
		tensors, err := take()
		if err != nil {
			return nil, err
		}
		staging, j.stagedBytes = tensors, 0
		for _, t := range tensors {
			j.stagedBytes += int64(len(t.Data))
		}
		return tensors, nil
	}
	res := j.res
	began := time.Now()
	epochBegan, epochSteps := began, 0
	evalSeconds := 0.0
	last := 0 // this job's steps done, counted from 1 (file names, End)
	for g := j.start; g < total; g++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		epoch, step := g/steps, g%steps
		if step == 0 && g > j.start {
			epochBegan, epochSteps = time.Now(), 0
		}
		if f := cfg.Fault; f != nil && f.Act != nil && !f.DuringSave && f.Step == g+1 {
			f.Act()
		}
		before.keep()
		l, err := j.forwardBackward(ctx, loader, batch, acc, epoch, step)
		if err == nil && cfg.Reduce != nil && j.model != nil {
			if err = cfg.Reduce(ctx, j.model.Grads()); err != nil {
				err = fmt.Errorf("gradient allreduce at step %d: %w", g+1, err)
			}
		}
		if err != nil {
			return j.stepFailed(g, before, err)
		}
		lr := j.opt.LR()
		j.opt.Step()
		res.Loss, res.GlobalStep, res.Steps = l, j.base+g+1, res.Steps+1
		last = g + 1
		info := StepInfo{
			Epoch: epoch + 1, StepInEpoch: step + 1, StepsPerEpoch: steps, GlobalStep: j.base + g + 1, TotalSteps: j.base + total,
			Loss: l, LearningRate: lr,
		}
		if (cfg.LogSteps > 0 && (g+1)%cfg.LogSteps == 0) || (cfg.LogSteps == 0 && step+1 == steps) {
			LossMonitorLine(cfg.Log, epoch+1, step+1, l)
		}
		if j.mc != nil {
			saveBegan := time.Now()
			path, err := j.mc.StepEnd(epoch+1, g+1, steps, snapshot)
			if err != nil {
				return err
			}
			if path != "" {
				info.Checkpoint = path
				info.SaveBlocked, info.SaveWait = time.Since(saveBegan), j.mc.LastWait()
				res.SaveBlocked, res.SaveWait, res.Saves = res.SaveBlocked+info.SaveBlocked, res.SaveWait+info.SaveWait, res.Saves+1
			}
		}
		epochSteps++
		if cfg.OnStep != nil {
			if secs := time.Since(epochBegan).Seconds(); secs > 0 {
				info.ImagesPerSec = float64(epochSteps*cfg.BatchSize*accum) / secs
			}
			info.DeviceMemory, _ = j.net.Device().MemoryInUse()
			cfg.OnStep(info)
		}
		j.lastEpoch = epoch + 1
		if cfg.EvalEachEpoch && step+1 == steps && g+1 < total {
			evalBegan := time.Now()
			if err := j.epochEval(ctx, epoch+1, j.base+g+1); err != nil {
				return err
			}
			evalSeconds += time.Since(evalBegan).Seconds()
		}
	}
	// The throughput is training's: the epochs' evaluations are left out.
	res.Seconds = time.Since(began).Seconds() - evalSeconds
	if res.Seconds > 0 {
		res.ImagesPerSec = float64(res.Steps*cfg.BatchSize*accum) / res.Seconds
	}
	if j.mc != nil && last > 0 {
		epoch := (last - 1) / steps
		saveBegan := time.Now()
		path, err := j.mc.End(epoch+1, last, steps, snapshot)
		if err != nil {
			return err
		}
		if path != "" {
			res.SaveBlocked, res.SaveWait, res.Saves = res.SaveBlocked+time.Since(saveBegan), res.SaveWait+j.mc.LastWait(), res.Saves+1
		}
	}
	return nil
}

// stepFailed is the end of a training whose step g (0-based) failed with
// err: with ExceptionSave it writes the state before that step as a
// breakpoint checkpoint (nothing when no step has run), putting back the
// moving statistics the failed forward pass changed. The breakpoint's own
// failure is reported with err.
func (j *training) stepFailed(g int, before *movingState, err error) error {
	if before == nil || g == 0 {
		return err
	}
	before.restore()
	tensors, serr := Snapshot(j.net, j.opt)
	if serr != nil {
		return errors.Join(err, fmt.Errorf("exception_save: %w", serr))
	}
	// A path with an error: the breakpoint was written, an earlier
	// asynchronous write had failed.
	path, werr := j.mc.SaveBreakpoint((g-1)/j.steps+1, g, j.steps, tensors)
	if path != "" {
		j.res.Breakpoint = path
		if j.cfg.Log != nil {
			fmt.Fprintf(j.cfg.Log, "exception_save: wrote %s, the state after step %d, before the failing step %d\n", path, g, g+1)
		}
	}
	if werr != nil {
		return errors.Join(err, fmt.Errorf("exception_save: %w", werr))
	}
	return err
}

// movingState keeps the values of a network's non-trainable parameters
// (BatchNorm's moving mean and variance) as they were before a step.
type movingState struct {
	params []*nn.Param
	saved  [][]float32
}

func newMovingState(params []*nn.Param) *movingState {
	m := &movingState{}
	for _, p := range params {
		if !p.Trainable {
			m.params = append(m.params, p)
			m.saved = append(m.saved, make([]float32, p.Value.Len()))
		}
	}
	return m
}

// keep copies the current values aside (nothing on a nil movingState).
func (m *movingState) keep() {
	if m == nil {
		return
	}
	for i, p := range m.params {
		copy(m.saved[i], p.Value.Data())
	}
}

// restore puts the kept values back.
func (m *movingState) restore() {
	for i, p := range m.params {
		copy(p.Value.Data(), m.saved[i])
	}
}

// checkFault refuses an injected fault at a step this run does not have
// (total is the last step, counted from 1), or during a save at a step
// that saves nothing.
func (j *training) checkFault(total int) error {
	f := j.cfg.Fault
	if f == nil {
		return nil
	}
	if f.Step < 1 || f.Step > total {
		return fmt.Errorf("%w: fault at step %d: this run has steps 1 to %d", ErrConfig, f.Step, total)
	}
	if f.DuringSave && (j.mc == nil || (f.Step%j.every != 0 && f.Step != total)) {
		return fmt.Errorf("%w: fault during the save of step %d: no checkpoint is saved after that step (every %d steps and at the last, %d)", ErrConfig, f.Step, j.every, total)
	}
	return nil
}

// faultInSave is the write progress hook of a fault DuringSave: it acts
// once half of the fault step's checkpoint (its tensor data; the file is a
// little larger) is in its temporary file, so that the kill lands in the
// middle of the write, not at its first or last byte. It runs in the
// writer (with async_save, a goroutine started after stagedBytes was set).
func (j *training) faultInSave(path string, written int64) {
	f := j.cfg.Fault
	if f.Act == nil {
		return
	}
	step := f.Step
	want := ckpt.FileName(j.mc.Prefix(), (step-1)/j.steps+1, (step-1)%j.steps+1)
	if written > 0 && 2*written >= j.stagedBytes && filepath.Base(path) == want {
		f.Act()
	}
}

// forwardBackward runs the micro-batches of step step of epoch epoch
// forward and backward, leaving the step's gradients in the trainable
// parameters (summed over the micro-batches in acc), and returns the
// step's mean loss.
func (j *training) forwardBackward(ctx context.Context, loader *data.Loader, batch *data.Batch, acc [][]float32, epoch, step int) (float32, error) {
	c, h, w := j.pipe.ImageShape()
	var l float32
	for micro := 0; micro < j.accum; micro++ {
		if err := loader.Fill(batch, epoch, step*j.accum+micro); err != nil {
			return 0, err
		}
		x, err := tensor.FromSlice(batch.Images[:batch.N*c*h*w], batch.N, c, h, w)
		if err != nil {
			return 0, err
		}
		ml, err := j.net.step(ctx, x, batch.Labels[:batch.N])
		if err != nil {
			return 0, err
		}
		if math.IsNaN(float64(ml)) || math.IsInf(float64(ml), 0) {
			return 0, fmt.Errorf("%w: loss is %v at epoch %d step %d (lower the learning rate)", ErrDiverged, ml, epoch+1, step+1)
		}
		l += ml / float32(j.accum)
		if j.accum > 1 {
			accumulate(acc, j.net.TrainableParams(), micro, j.accum)
		}
	}
	return l, nil
}

// finish evaluates the trained model when asked and reports the device's
// peak memory.
func (j *training) finish(ctx context.Context) error {
	cfg := j.cfg
	if cfg.Eval {
		// Evaluation takes a while on a loaded machine (every rank runs the
		// whole test set): say so, or the console goes quiet after the
		// last step.
		if cfg.Log != nil {
			fmt.Fprintln(cfg.Log, "evaluating on the test set")
		}
		acc, el, err := evaluate(ctx, j.net.predict, cfg.DataDir, evalBatch(cfg))
		if err != nil {
			return err
		}
		j.res.Accuracy, j.res.EvalLoss = acc, el
		if cfg.OnEval != nil && j.res.GlobalStep > 0 {
			cfg.OnEval(EvalInfo{Epoch: max(j.lastEpoch, 1), GlobalStep: j.res.GlobalStep, Accuracy: acc, Loss: el, Final: true})
		}
	}
	_, j.res.PeakDeviceMemory = j.net.Device().MemoryInUse()
	j.res.DeviceMemory = cfg.DeviceMemory
	return nil
}

// evalBatch is the batch size of evaluations: at least 100 images, fewer
// calls for the same work.
func evalBatch(cfg Config) int { return max(cfg.BatchSize, 100) }

// epochEval measures accuracy and loss on the test split after epoch
// epoch, at global step globalStep, says so in the log and reports it on
// OnEval. With SumAcross, this rank scores its part of the test set and
// the ranks add up their counts (exact in float32 up to 2^24 images).
func (j *training) epochEval(ctx context.Context, epoch, globalStep int) error {
	cfg := j.cfg
	part, parts := 0, 1
	if cfg.SumAcross != nil && cfg.EvalParts > 1 {
		part, parts = cfg.EvalPart, cfg.EvalParts
	}
	correct, seen, lossSum, err := evaluatePart(ctx, j.net.predict, cfg.DataDir, evalBatch(cfg), part, parts)
	if err != nil {
		return fmt.Errorf("evaluation after epoch %d: %w", epoch, err)
	}
	if parts > 1 {
		sums := []float32{float32(correct), float32(seen), float32(lossSum)}
		if err := cfg.SumAcross(ctx, sums); err != nil {
			return fmt.Errorf("evaluation after epoch %d: add up the ranks' counts: %w", epoch, err)
		}
		correct, seen, lossSum = int(sums[0]), int(sums[1]), float64(sums[2])
	}
	if seen == 0 {
		return fmt.Errorf("evaluation after epoch %d: the test split of %s is empty", epoch, cfg.DataDir)
	}
	acc, loss := float64(correct)/float64(seen), lossSum/float64(seen)
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "eval after epoch %d: accuracy %.4f, loss %.4f\n", epoch, acc, loss)
	}
	if cfg.OnEval != nil {
		cfg.OnEval(EvalInfo{Epoch: epoch, GlobalStep: globalStep, Accuracy: acc, Loss: loss})
	}
	return nil
}

// StepsPerEpoch returns the steps of one epoch of cfg's job as its rank
// reads the data (its shard, its batch, the gradient accumulation),
// without building the network.
func StepsPerEpoch(cfg Config) (int, error) {
	j := &training{cfg: cfg}
	if err := j.openData(); err != nil {
		return 0, err
	}
	return j.steps, nil
}
