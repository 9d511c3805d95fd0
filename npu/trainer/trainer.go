package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/tensor"
)

// ErrConfig is wrapped by errors about a Config.
var ErrConfig = errors.New("invalid training config")

// ErrDiverged is returned when the loss stops being a finite number.
var ErrDiverged = errors.New("training diverged")

// Config is one device's training job.
type Config struct {
	DataDir string // a cifar-10-batches-bin directory
	Model   string // "resnet20", "resnet50" or "cnn" (no BatchNorm)

	// Options left zero take their value from Defaults.

	Epochs       int
	BatchSize    int     // per device
	LearningRate float64 // peak rate
	Momentum     float64 // set NoMomentum for 0
	NoMomentum   bool
	WeightDecay  float64
	Schedule     string // "constant", "cosine", "step", ... (optim.Schedule modes)
	WarmupEpochs int
	Seed         uint64 // model init, sampler and augmentation
	Threads      int    // 0: GOMAXPROCS

	// NumShards and ShardID select this device's share of the data
	// (MindSpore's num_shards/shard_id); 0 and 0 mean all of it.
	NumShards, ShardID int
	// ImageWindow, when set, keeps only that box of every training image
	// (a dataset_strategy that cuts images among the devices).
	ImageWindow data.Window
	// ShuffleBuffer is dataset.shuffle(buffer_size); 0 means the seeds' 10,
	// -1 turns it off.
	ShuffleBuffer int
	// NoAugment turns off RandomCrop and RandomHorizontalFlip.
	NoAugment bool

	// CkptDir receives checkpoints ("" saves none). SaveCheckpointSteps 0
	// saves once per epoch.
	CkptDir             string
	Prefix              string
	SaveCheckpointSteps int
	KeepCheckpointMax   int
	// CRCCheck appends MindSpore's crc_num trailer to every checkpoint
	// (save_checkpoint's crc_check). Off, as in MindSpore, the files are
	// plain protobuf; either way a sidecar digest proves them on resume.
	CRCCheck bool
	// AsyncSave is CheckpointConfig's async_save: a save copies the
	// tensors to host memory and a writer goroutine writes the file while
	// training goes on (at most one write in flight; a save that finds the
	// previous one unfinished waits). The files are byte for byte those of
	// a synchronous save, and Train returns only once every write is
	// committed.
	AsyncSave bool
	// ExceptionSave is CheckpointConfig's exception_save: when a step
	// fails (a peer's death seen in a collective, a diverged loss), the
	// state before that step is written to
	// {prefix}-{epoch}_{step}_breakpoint.ckpt (see ckpt.SaveBreakpoint).
	// Resume does not pick such files; Init can start from one.
	ExceptionSave bool
	// Fault, when set, injects a failure into this rank (for tests and
	// demos of failure handling).
	Fault *Fault

	// Init is a checkpoint file to start from: its weights, and its
	// optimizer state when it has one.
	Init string
	// InitResumes says that Init is a checkpoint of this same training
	// (saved by it, then resharded for this job's devices, as npu/train's
	// on_failure: shrink does): training picks up after it as a resume
	// would, at the step its file name gives ({prefix}-{epoch}_{step}),
	// instead of at step 1, and Init must hold the optimizer state. The
	// global step continues Init's, and the count of this job's steps
	// (epochs, file names) continues from the step it resumes at.
	InitResumes bool
	// Resume continues from the newest checkpoint in CkptDir (if any),
	// optimizer state included, so the result equals an uninterrupted run.
	Resume bool

	// DeviceMemory is the simulated device's memory capacity in bytes: the
	// model's buffers, parameters, gradients, optimizer state and input
	// batch must fit, or training fails with nn.ErrOutOfMemory naming the
	// buffer that did not.
	DeviceMemory int64

	// Eval measures accuracy and loss on the test split after training.
	Eval bool
	// EvalEachEpoch also measures them at the end of every epoch before
	// the job's last step (whose measure is Eval's), as a MindSpore
	// callback that calls Model.eval at epoch_end does. It runs on every
	// rank of a job that trains together: with SumAcross set, the ranks
	// share the test set (rank EvalPart of EvalParts scores every
	// EvalParts-th batch) and SumAcross adds up their counts; without it
	// each rank scores the whole set. Training is unchanged by it, bit
	// for bit.
	EvalEachEpoch       bool
	EvalPart, EvalParts int
	// SumAcross, when set, sums v element-wise over every rank, in place
	// (a collective call every rank makes equally often).
	SumAcross func(ctx context.Context, v []float32) error
	// OnEval is called with every evaluation this rank reports: each
	// epoch's and Eval's final one.
	OnEval func(EvalInfo)
	// MaxSteps stops after this many steps in all (0: no limit).
	MaxSteps int

	// LogSteps prints a LossMonitor line every LogSteps steps; 0 prints one
	// per epoch, as MindSpore does in dataset sink mode.
	LogSteps int
	// Log receives the LossMonitor lines (nil discards them).
	Log io.Writer
	// GradAccumulation is MindSpore's grad_accumulation_step: every step
	// runs this many micro-batches of BatchSize and applies the mean of
	// their gradients, the update of one batch that many times larger
	// (0 or 1: none).
	GradAccumulation int
	// Reduce, when set, reduces the gradients of every step in place before
	// the optimizer sees them: the data-parallel AllReduce (mean).
	Reduce func(ctx context.Context, grads []float32) error
	// AllocGrads, when set, provides the memory the gradients live in
	// (for instance a communicator's shared memory, so Reduce copies
	// nothing); it is called once with the number of gradient elements.
	AllocGrads func(ctx context.Context, n int) ([]float32, error)
	// Broadcast, when set, is called once after initialisation with all
	// parameter values (parameter_broadcast from rank 0).
	Broadcast func(ctx context.Context, values []float32) error
	// Sharded, when set, builds this rank's part of a network split across
	// ranks (semi_auto_parallel, auto_parallel, hybrid_parallel) on a device
	// of the given memory capacity, instead of a whole Model; the network
	// does its own communication, so Reduce, AllocGrads and Broadcast must
	// be nil. Checkpoints hold this rank's slices, or with IntegratedSave
	// the whole tensors, gathered by the network and written by rank 0.
	Sharded func(memory int64) (ShardedNet, error)
	// IntegratedSave is CheckpointConfig's integrated_save for a sharded
	// network: rank 0 writes whole tensors (the other ranks write none).
	IntegratedSave bool
	// Rank is this rank: a whole checkpoint restores into its slices.
	Rank int
	// ResumeDir, when set, is where Resume looks for checkpoints instead
	// of CkptDir: with IntegratedSave, every rank resumes from rank 0's.
	ResumeDir string
	// OnStep is called after every step.
	OnStep func(StepInfo)
	// StepRange, when set, returns the smallest and the largest of every
	// rank's step (a collective call every rank makes equally often). With
	// it, Resume starts all ranks from the newest checkpoint that every
	// one of them has: a rank killed between two saves leaves its peers a
	// checkpoint ahead, and resuming each from its own newest file would
	// reduce gradients of different steps.
	StepRange func(ctx context.Context, step int) (lo, hi int, err error)
}

// StepInfo describes one finished step. The step with StepInEpoch ==
// StepsPerEpoch ends its epoch.
type StepInfo struct {
	Epoch, StepInEpoch, StepsPerEpoch int // 1-based epoch and step of this job
	// GlobalStep is the optimizer's global step after this step: it
	// continues an Init checkpoint's count, so one loss curve runs through
	// a training and the one that starts from its checkpoint.
	GlobalStep   int
	TotalSteps   int // the global step at which this job ends
	Loss         float32
	LearningRate float32 // the rate this step applied
	// ImagesPerSec is this device's throughput over the steps of the
	// current epoch run so far (a resumed epoch counts from the resume).
	ImagesPerSec float64
	// DeviceMemory is the memory in use on the device after the step.
	DeviceMemory int64
	// Checkpoint is the file saved after this step, or "": with AsyncSave
	// its write has begun, and is committed by the next save or the end.
	Checkpoint string
	// SaveBlocked is how long this step's save held training up: the
	// snapshot (and, gathering whole tensors, its collective), and then
	// the whole write when saving synchronously, or the wait for the
	// previous write (SaveWait) with AsyncSave. 0 when nothing was saved.
	SaveBlocked time.Duration
	// SaveWait is the part of SaveBlocked spent waiting for the previous
	// asynchronous write to finish.
	SaveWait time.Duration
}

// Fault is an injected failure: Act is called (and is expected not to
// return, e.g. to kill the process) at the start of step Step of this job
// (counted from 1 over all epochs), or with DuringSave part-way through
// writing the checkpoint of that step, which must then be a save step.
// With Act nil the fault is only checked against the run (the ranks that
// do not fail check it too).
type Fault struct {
	Step       int
	DuringSave bool
	Act        func()
}

// EvalInfo is one evaluation on the test split: after epoch Epoch of
// this job, at the optimizer's global step GlobalStep.
type EvalInfo struct {
	Epoch, GlobalStep int
	Accuracy, Loss    float64
	Final             bool // Config.Eval's evaluation after the last step
}

// Result is what a training job produced.
type Result struct {
	Loss float32 // of the last step
	// GlobalStep is the optimizer's global step after the last step run:
	// it continues an Init checkpoint's count (MindSpore's global_step).
	GlobalStep   int
	Steps        int // steps run by this call (less than GlobalStep after a resume)
	Seconds      float64
	ImagesPerSec float64 // this device's images per second of training
	Checkpoint   string  // the last checkpoint written, or ""
	Accuracy     float64 // held-out accuracy when Config.Eval, else NaN
	EvalLoss     float64 // held-out mean loss when Config.Eval, else NaN
	ResumedFrom  string  // checkpoint a Resume started from, or ""
	// Recut lists the tensors of Init this rank cut from whole tensors to
	// its slices, sorted: none when Init was laid out for this job.
	Recut []string
	// PeakDeviceMemory is the most device memory in use at once (bytes),
	// and DeviceMemory the capacity it was counted against.
	PeakDeviceMemory, DeviceMemory int64
	StepsPerEpoch                  int
	// PeakSaveStaging is the most host memory the tensors handed to the
	// asynchronous checkpoint writer held at once (AsyncSave; at most one
	// checkpoint of this rank).
	PeakSaveStaging int64
	// Breakpoint is the checkpoint ExceptionSave wrote, or "".
	Breakpoint string
	// SaveBlocked is the time checkpoint saves held training up in all
	// (StepInfo.SaveBlocked summed, the final save included), SaveWait the
	// part of it spent waiting for a previous asynchronous write, and
	// Saves the number of saves.
	SaveBlocked, SaveWait time.Duration
	Saves                 int
}

// Defaults returns the value each option of Config takes when it is left
// zero. It is the one table of training defaults: the npu/train stage
// builds its schema's defaults from it too.
func Defaults() Config {
	return Config{
		Model:             "resnet20",
		Epochs:            1,
		BatchSize:         32,
		LearningRate:      0.01, // the seeds' Momentum(…, 0.01, 0.9)
		Momentum:          0.9,
		Schedule:          "constant",
		NumShards:         1,
		Prefix:            ckpt.DefaultPrefix,
		KeepCheckpointMax: 5,
		DeviceMemory:      nn.Ascend910Memory,
	}
}

func (c *Config) defaults() error {
	d := Defaults()
	if c.Model == "" {
		c.Model = d.Model
	}
	if c.Epochs == 0 {
		c.Epochs = d.Epochs
	}
	if c.BatchSize == 0 {
		c.BatchSize = d.BatchSize
	}
	if c.LearningRate == 0 {
		c.LearningRate = d.LearningRate
	}
	if c.Momentum == 0 && !c.NoMomentum {
		c.Momentum = d.Momentum
	}
	if c.Schedule == "" {
		c.Schedule = d.Schedule
	}
	if c.NumShards == 0 {
		c.NumShards = d.NumShards
	}
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.KeepCheckpointMax == 0 {
		c.KeepCheckpointMax = d.KeepCheckpointMax
	}
	if c.DeviceMemory == 0 {
		c.DeviceMemory = d.DeviceMemory
	}
	switch {
	case c.DataDir == "":
		return fmt.Errorf("%w: no data directory", ErrConfig)
	case c.GradAccumulation < 0:
		return fmt.Errorf("%w: gradient accumulation %d must not be negative", ErrConfig, c.GradAccumulation)
	case c.Epochs < 0 || c.BatchSize < 0:
		return fmt.Errorf("%w: epochs %d and batch size %d must be positive", ErrConfig, c.Epochs, c.BatchSize)
	case !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0):
		return fmt.Errorf("%w: learning rate %g must be positive", ErrConfig, c.LearningRate)
	case c.Resume && c.CkptDir == "":
		return fmt.Errorf("%w: resume needs a checkpoint directory", ErrConfig)
	}
	return nil
}

// NewModel builds the named model.
func NewModel(name string, seed uint64, threads int) (*nn.Model, error) {
	return newModel(name, nn.ResNetConfig{Seed: seed, Threads: threads})
}

func newModel(name string, cfg nn.ResNetConfig) (*nn.Model, error) {
	switch name {
	case "resnet20", "":
		return nn.NewResNet20(cfg)
	case "resnet50":
		return nn.NewResNet50(cfg)
	case "cnn":
		return nn.NewCNN(cfg)
	}
	return nil, fmt.Errorf("%w: unknown model %q (resnet20, resnet50 or cnn)", ErrConfig, name)
}

// LossMonitorLine writes MindSpore's LossMonitor line, e.g.
// "epoch: 1 step: 156, loss is 2.0084016" (the loss as the shortest
// float32 text, as numpy prints it).
func LossMonitorLine(w io.Writer, epoch, step int, loss float32) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "epoch: %d step: %d, loss is %s\n", epoch, step, strconv.FormatFloat(float64(loss), 'g', -1, 32))
}

// Evaluate returns the accuracy and mean loss of model on the test split of
// dataDir, without augmentation.
func Evaluate(ctx context.Context, model *nn.Model, dataDir string, batchSize int) (accuracy, meanLoss float64, err error) {
	return evaluate(ctx, func(_ context.Context, x *tensor.Tensor) (*tensor.Tensor, error) { return model.Forward(x, false) }, dataDir, batchSize)
}

// EvaluateSharded is Evaluate for a split network: every rank calls it
// (Predict is collective); on one device the network is the whole model.
func EvaluateSharded(ctx context.Context, net ShardedNet, dataDir string, batchSize int) (accuracy, meanLoss float64, err error) {
	return evaluate(ctx, net.Predict, dataDir, batchSize)
}

// evaluate is Evaluate with a network's inference: logits for a batch.
func evaluate(ctx context.Context, predict func(context.Context, *tensor.Tensor) (*tensor.Tensor, error), dataDir string, batchSize int) (accuracy, meanLoss float64, err error) {
	correct, seen, sum, err := evaluatePart(ctx, predict, dataDir, batchSize, 0, 1)
	if err != nil {
		return 0, 0, err
	}
	if seen == 0 {
		return 0, 0, fmt.Errorf("evaluate: the test split of %s is empty", dataDir)
	}
	return float64(correct) / float64(seen), sum / float64(seen), nil
}

// evaluatePart scores this rank's part of the test split (batches of
// batchSize, the last one short): the images predicted correctly, the
// images seen and their summed loss. Batch part, part+parts,
// part+2·parts, ... is this rank's, so parts ranks together score every
// image exactly once. Every rank calls predict equally often with
// batches of one shape, as a split network's collective Predict needs: a
// rank whose batch is short or missing in a round fills it with images
// of the first batch and leaves their rows out of its counts (BatchNorm
// predicts with its moving statistics, so rows do not affect each other).
func evaluatePart(ctx context.Context, predict func(context.Context, *tensor.Tensor) (*tensor.Tensor, error), dataDir string, batchSize, part, parts int) (correct, seen int, lossSum float64, err error) {
	set, err := data.ReadDir(dataDir, data.SplitTest)
	if err != nil {
		return 0, 0, 0, err
	}
	pipe, err := data.NewPipeline(set, data.EvalConfig(1, 0, batchSize))
	if err != nil {
		return 0, 0, 0, err
	}
	loader := pipe.NewLoader()
	batch, first := pipe.NewBatch(), pipe.NewBatch()
	loss := nn.NewSoftmaxCrossEntropyExpand()
	c, h, w := pipe.ImageShape()
	img := c * h * w
	batches := pipe.StepsPerEpoch()
	if batches == 0 {
		return 0, 0, 0, nil
	}
	if parts > 1 {
		if err := loader.Fill(first, 0, 0); err != nil {
			return 0, 0, 0, err
		}
	}
	for round := 0; round*parts < batches; round++ {
		if err := ctx.Err(); err != nil {
			return 0, 0, 0, err
		}
		n, rows := 0, batch
		if b := round*parts + part; b < batches {
			if err := loader.Fill(batch, 0, b); err != nil {
				return 0, 0, 0, err
			}
			n = batch.N
		}
		switch {
		case parts > 1 && n == 0:
			rows = first // nothing of this rank's: predict, count nothing
		case parts > 1 && n < first.N:
			// Pad to the first batch's shape, which every rank uses (the
			// batch's arrays have room for a full batch).
			imgs := append(batch.Images[:n*img], first.Images[n*img:first.N*img]...)
			rows = &data.Batch{Images: imgs, N: first.N}
		}
		x, err := tensor.FromSlice(rows.Images[:rows.N*img], rows.N, c, h, w)
		if err != nil {
			return 0, 0, 0, err
		}
		logits, err := predict(ctx, x)
		if err != nil {
			return 0, 0, 0, err
		}
		if n == 0 {
			continue
		}
		classes := logits.Dim(1)
		out := logits.Data()[:n*classes]
		scored := logits
		if n < logits.Dim(0) {
			if scored, err = tensor.FromSlice(out, n, classes); err != nil {
				return 0, 0, 0, err
			}
		}
		l, err := loss.Forward(scored, batch.Labels[:n])
		if err != nil {
			return 0, 0, 0, err
		}
		lossSum += float64(l) * float64(n)
		for i := 0; i < n; i++ {
			row := out[i*classes : (i+1)*classes]
			best := 0
			for j := range row {
				if row[j] > row[best] {
					best = j
				}
			}
			if int32(best) == batch.Labels[i] {
				correct++
			}
		}
		seen += n
	}
	return correct, seen, lossSum, nil
}

// resumePoint returns the checkpoint to resume from and its tensors, or ""
// to start afresh: the newest that reads and verifies (a file damaged by a
// crash or a flipped bit is skipped, and the log says so), and, with
// StepRange, the newest step every rank has a checkpoint of. Ranks agree
// in rounds: each offers its newest step not after the last round's
// smallest; when smallest and largest meet, all hold that step (or all
// start afresh at 0).
func resumePoint(ctx context.Context, cfg Config, prefix string, stepsPerEpoch int) (string, []ckpt.Tensor, error) {
	dir := cfg.CkptDir
	if cfg.ResumeDir != "" {
		dir = cfg.ResumeDir
	}
	mine, err := listCheckpoints(dir, prefix, stepsPerEpoch, cfg.Log)
	// Rank 0 may not have made its directory yet: no checkpoint either.
	if err != nil && !(cfg.ResumeDir != "" && errors.Is(err, fs.ErrNotExist)) {
		return "", nil, err
	}
	limit := math.MaxInt
	for {
		c := mine.newest(limit)
		if cfg.StepRange == nil {
			return c.path, c.tensors, nil
		}
		lo, hi, err := cfg.StepRange(ctx, c.step)
		if err != nil {
			return "", nil, fmt.Errorf("agree on a checkpoint with the other ranks: %w", err)
		}
		if lo == hi { // every rank offered the same step
			return c.path, c.tensors, nil
		}
		if cfg.Log != nil && c.step > lo {
			fmt.Fprintf(cfg.Log, "resume: another rank's newest checkpoint is at step %d, before this rank's %d: all ranks go back to it\n", lo, c.step)
		}
		limit = lo
	}
}

// CommonCheckpoint returns the step a job's ranks resume from when each
// saved its checkpoints of prefix in one of dirs — the newest step every
// directory holds a checkpoint of that reads and verifies, by the rounds
// resumePoint's ranks agree in — and those files in dirs' order; step 0
// and no files when there is none. Steps count from 1 over epochs of
// stepsPerEpoch steps. It reads the files, but needs no rank running:
// npu/train's on_failure: shrink chooses with it after a job's ranks have
// ended. Skipped files are reported on log (if not nil).
func CommonCheckpoint(dirs []string, prefix string, stepsPerEpoch int, log io.Writer) (int, []string, error) {
	lists := make([]*checkpointList, len(dirs))
	for i, d := range dirs {
		l, err := listCheckpoints(d, prefix, stepsPerEpoch, log)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, nil, err
		}
		lists[i] = l
	}
	limit := math.MaxInt
	for {
		lo, hi := math.MaxInt, 0
		files := make([]string, len(dirs))
		for i, l := range lists {
			c := l.newest(limit)
			lo, hi, files[i] = min(lo, c.step), max(hi, c.step), c.path
		}
		if lo == hi { // every directory holds step lo (0: none)
			if lo == 0 {
				return 0, nil, nil
			}
			return lo, files, nil
		}
		limit = lo
	}
}

// checkpointList is a directory's checkpoints, newest first, read and
// verified as they are asked for; a file that does not verify is skipped
// from then on, and the log says so.
type checkpointList struct {
	files         []string
	bad           map[string]bool
	stepsPerEpoch int
	log           io.Writer
}

// checkpoint is a verified checkpoint and its step (0: none).
type checkpoint struct {
	path    string
	tensors []ckpt.Tensor
	step    int
}

// listCheckpoints lists dir's checkpoints of prefix; a directory without
// any is an empty list.
func listCheckpoints(dir, prefix string, stepsPerEpoch int, log io.Writer) (*checkpointList, error) {
	l := &checkpointList{bad: map[string]bool{}, stepsPerEpoch: stepsPerEpoch, log: log}
	files, err := ckpt.NewestFirst(dir, prefix)
	if err != nil && !errors.Is(err, ckpt.ErrNoCheckpoint) {
		return l, err
	}
	l.files = files
	return l, nil
}

// newest returns the newest checkpoint at or before step limit that
// reads and verifies.
func (l *checkpointList) newest(limit int) checkpoint {
	for _, f := range l.files {
		_, epoch, inEpoch, ok := ckpt.ParseFileName(filepath.Base(f))
		step := (epoch-1)*l.stepsPerEpoch + inEpoch
		if !ok || step > limit || l.bad[f] {
			continue
		}
		file, err := ckpt.ReadVerified(f)
		if err != nil {
			l.bad[f] = true
			if l.log != nil {
				fmt.Fprintf(l.log, "resume: skipped %s: %v\n", f, err)
			}
			continue
		}
		return checkpoint{f, file.Tensors, step}
	}
	return checkpoint{}
}

// network is what the training loop drives: a whole model on this device
// or this rank's part of a sharded one.
type network interface {
	Name() string
	Params() []*nn.Param
	TrainableParams() []*nn.Param
	Device() *nn.Device
	Close()
	// step runs one (micro-)batch forward and backward, leaving its
	// gradients in the trainable parameters' Grad.
	step(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error)
	// predict returns the logits of a batch (every rank of a sharded
	// network calls it together).
	predict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error)
}

func (m *wholeModel) predict(_ context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
	return m.Forward(x, false)
}

func gradLen(params []*nn.Param) int {
	n := 0
	for _, p := range params {
		n += p.Value.Len()
	}
	return n
}

// wholeModel is a network held whole on this device (stand_alone and
// data_parallel): one step is forward, the loss and backward.
type wholeModel struct {
	*nn.Model
	loss *nn.SoftmaxCrossEntropyExpand
}

// step runs one (micro-)batch forward and backward, leaving the gradients
// of this device's batch in the parameters' Grad.
func (m *wholeModel) step(_ context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	logits, err := m.Forward(x, true)
	if err != nil {
		return 0, err
	}
	l, err := m.loss.Forward(logits, labels)
	if err != nil {
		return 0, err
	}
	dlogits, err := m.loss.Backward()
	if err != nil {
		return 0, err
	}
	return l, m.Backward(dlogits)
}

// accumulate folds the gradients of micro-batch micro of accum into acc,
// and after the last one leaves their mean in the parameters' Grad: the
// gradient of the mean loss over all accum micro-batches.
func accumulate(acc [][]float32, params []*nn.Param, micro, accum int) {
	for i, p := range params {
		g := p.Grad.Data()
		switch {
		case micro == 0:
			copy(acc[i], g)
		default:
			for j, v := range g {
				acc[i][j] += v
			}
		}
		if micro == accum-1 {
			inv := 1 / float32(accum)
			for j, v := range acc[i] {
				g[j] = v * inv
			}
		}
	}
}
