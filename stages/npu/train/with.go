package train

import (
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// With is the stage's `with` block.
type With struct {
	Data                string                   `json:"data" jsonschema:"minLength=1,format=path" description:"cifar-10-batches-bin directory (usually stages.prepare.outputs.dir)"`
	Model               string                   `json:"model,omitempty" jsonschema:"enum=resnet20|resnet50|cnn|semi_auto_net|hybrid_net|wide_net" description:"resnet20: the small CIFAR ResNet (the CPU default); resnet50: the seeds' ResNet-50; cnn: a small CNN without BatchNorm (data parallel equals stand_alone exactly); semi_auto_net: the seeds' SemiAutoParallelNet as a CIFAR classifier (fc.matmul, relu, end_point); hybrid_net: the seeds' HybridParallelNet (hybrid_parallel only); wide_net: a 3072x4096 layer that does not fit a small device whole"`
	Mode                parallel.Mode            `json:"mode,omitempty" description:"MindSpore parallel_mode: stand_alone (one device), data_parallel (a replica per device, gradients all-reduced), semi_auto_parallel (operators split by strategy), auto_parallel (strategies searched by a cost model; see mspipe plan), hybrid_parallel (the model's own split, e.g. hybrid_net)"`
	Strategy            parallel.Strategy        `json:"strategy,omitempty" description:"semi_auto_parallel: shard strategy per operator, as MindSpore's shard(), e.g. {fc.matmul: [[1, 1], [1, 2]]}: one list per input, one split count per dimension; operators without one run data parallel"`
	FullBatch           bool                     `json:"full_batch,omitempty" description:"every device loads the whole global batch (batch_size × devices) instead of its shard"`
	DatasetStrategy     parallel.DatasetStrategy `json:"dataset_strategy,omitempty" description:"MindSpore's dataset_strategy: data_parallel (the default), full_batch (as full_batch: true), or one split list per dataset column for semi_auto_parallel and auto_parallel, e.g. [[1, 1, 2, 1], [1]]: each device loads only its piece of every image (NCHW, here cut in two along H; labels whole), the first convolutions, poolings and BatchNorms run on the pieces exchanging halo rows and columns; global batch = batch_size × the batch split"`
	PipelineStages      int                      `json:"pipeline_stages,omitempty" jsonschema:"minimum=1" description:"pipeline parallel (MindSpore's pipeline_stages; semi_auto_parallel and auto_parallel): cut the network into this many stages, each trained by devices / pipeline_stages devices (rank r on stage r / (devices / pipeline_stages)) with its own strategy layout, activations passed forward and gradients back between neighbouring stages; each rank saves its stage's parameters. 1: no pipeline"`
	MicroSize           int                      `json:"micro_size,omitempty" jsonschema:"minimum=1" description:"pipeline parallel: micro-batches per step (MindSpore's PipelineCell micro_size): the global batch (batch_size × devices / pipeline_stages) is cut into this many, whose gradients add up before one update; the pipeline idles (K−1)/(micro_size+K−1) of a step for K stages"`
	PipelineSchedule    string                   `json:"pipeline_schedule,omitempty" jsonschema:"enum=1f1b|gpipe" description:"pipeline parallel: 1f1b (default; after a warm-up each stage alternates one forward and one backward, keeping at most K−s micro-batches in flight on stage s) or gpipe (every forward, then every backward); both give the same bits"`
	PipelineStage       map[string]int           `json:"pipeline_stage,omitempty" description:"pipeline parallel: the stage of an operator (MindSpore's cell.pipeline_stage), e.g. {conv2: 1}; operators not named stay on the stage of the one before them, the first ones on stage 0; default: the cut where the largest stage holds the fewest parameters"`
	ParallelOptimizer   bool                     `json:"parallel_optimizer,omitempty" description:"MindSpore's enable_parallel_optimizer (data_parallel, semi_auto_parallel, auto_parallel): each parameter's weight update and optimizer moments are split along dimension 0 over the ranks that hold the same slice of it, and the updated weights all-gathered before the next forward; the moments per device shrink, the result is the same. A parameter whose slice's first dimension does not divide stays whole"`
	OptimizerShardSize  int                      `json:"optimizer_weight_shard_size,omitempty" jsonschema:"minimum=1" description:"MindSpore's optimizer_weight_shard_size: how many ranks split each parameter's update (default: all the ranks that hold the same slice); must divide each split parameter's data-parallel group"`
	GradAccumulation    int                      `json:"grad_accumulation_step,omitempty" jsonschema:"minimum=1" description:"micro-batches per step: the update is that of one batch this many times larger"`
	StrategySaveFile    string                   `json:"strategy_ckpt_save_file,omitempty" description:"where to write the strategy file (MindSpore's ParallelStrategyMap protobuf; .json for the JSON form), relative to the stage's work directory; default strategy.ckpt for split modes"`
	Epochs              int                      `json:"epochs,omitempty" jsonschema:"minimum=1"`
	BatchSize           int                      `json:"batch_size,omitempty" jsonschema:"minimum=1" description:"batch size per device"`
	LearningRate        float64                  `json:"learning_rate,omitempty" jsonschema:"exclusiveMinimum=0"`
	Momentum            float64                  `json:"momentum,omitempty" jsonschema:"minimum=0,exclusiveMaximum=1"`
	WeightDecay         float64                  `json:"weight_decay,omitempty" jsonschema:"minimum=0"`
	LRSchedule          string                   `json:"lr_schedule,omitempty" jsonschema:"enum=constant|cosine|step|steps|poly|linear"`
	WarmupEpochs        int                      `json:"warmup_epochs,omitempty" jsonschema:"minimum=0"`
	Seed                int                      `json:"seed,omitempty" jsonschema:"minimum=0"`
	Init                string                   `json:"init,omitempty" jsonschema:"format=path" description:"checkpoint file, or a directory with device{i}/ckpt_{i}/ per rank, to start from"`
	GradientsMean       *bool                    `json:"gradients_mean,omitempty" description:"data parallel: average gradients (allreduce_mean) instead of summing; default true"`
	ParameterBroadcast  bool                     `json:"parameter_broadcast,omitempty" description:"data parallel: broadcast rank 0's initial parameters"`
	SaveCheckpointSteps int                      `json:"save_checkpoint_steps,omitempty" jsonschema:"minimum=1" description:"save every this many steps (default: once per epoch)"`
	KeepCheckpointMax   int                      `json:"keep_checkpoint_max,omitempty" jsonschema:"minimum=1"`
	Prefix              string                   `json:"prefix,omitempty" jsonschema:"pattern=^[A-Za-z0-9_.]+$"`
	CRCCheck            bool                     `json:"crc_check,omitempty" description:"append MindSpore's crc_num trailer to every checkpoint (save_checkpoint's crc_check); off, as in MindSpore, the files are plain protobuf that every MindSpore version reads, and a sidecar {file}.sha256 proves them on resume either way"`
	AsyncSave           bool                     `json:"async_save,omitempty" description:"CheckpointConfig's async_save: a save copies this rank's tensors to host memory (one checkpoint per rank at most) and a writer goroutine writes the file while training goes on; a save that finds the previous write unfinished waits, and the step events say how long. The files are the same bytes as a synchronous save's, and the stage ends only after every write is committed"`
	ExceptionSave       bool                     `json:"exception_save,omitempty" description:"CheckpointConfig's exception_save: when a step fails (a peer died, the loss diverged), each rank that can writes the state before that step to {prefix}-{epoch}_{step}_breakpoint.ckpt in its ckpt_{i}/ (this rank's own tensors, also with integrated_save). Resume does not pick these files; use one as init"`
	Fault               *job.Fault               `json:"fault,omitempty" description:"for testing failure handling only: rank rank dies (SIGKILL) at step step of this training, e.g. {rank: 1, step: 20} or {rank: 1, step: 20, kind: kill_during_save}; it fires once per work directory (device{rank}/fault_fired records it), so resuming gets past it; with on_failure: shrink, shrink: k puts it in the job that continues after the k-th shrink"`
	Faults              []job.Fault              `json:"faults,omitempty" description:"for testing failure handling only: several faults, each as fault is (at most one per job of an elastic stage: give each its shrink), e.g. [{rank: 5, step: 6}, {rank: 1, step: 9, shrink: 1}]; not with fault"`
	OnFailure           string                   `json:"on_failure,omitempty" jsonschema:"enum=fail|shrink" description:"what the stage does when a rank dies or is declared dead: fail (the default) stops the other ranks and fails, naming the rank; shrink stops them, takes the newest checkpoint step every rank saved and verified, reshards it exactly to the largest device count n not above the surviving devices on which this stage's plan succeeds (same global batch: batch_size × devices / n per device; see docs/parallel-modes.md), and continues training there in <workdir>/shrink{k}/ up to max_shrinks times. It works in every mode of several devices (auto_parallel searches again for n devices), with parallel_optimizer too (each rank of the new job gets its own pieces) and with pipeline_stages (n a multiple of the stages, which are kept: each stage goes on on n / pipeline_stages devices, each rank getting its stage's slices), not with a dataset_strategy tuple, and with the local launcher on one server only"`
	MaxShrinks          *int                     `json:"max_shrinks,omitempty" jsonschema:"minimum=0" description:"with on_failure: shrink, how many times the stage shrinks before a failure fails it (default 3; 0 behaves as on_failure: fail)"`
	InitResumes         bool                     `json:"init_resumes,omitempty" description:"init is a checkpoint of this same training (e.g. resharded with ckpt/reshard for this cluster after a device failed): training resumes after its epoch and step (from its file name, {prefix}-{epoch}_{step}.ckpt) with its optimizer state, instead of starting at step 1; epochs is still the whole training's. What on_failure: shrink does by itself"`
	IntegratedSave      *bool                    `json:"integrated_save,omitempty" description:"split modes: true (MindSpore's default) has rank 0 save whole tensors; false has every rank save its slices (merge them with ckpt/integrate or mspipe ckpt merge)"`
	DeviceMemory        string                   `json:"device_memory,omitempty" description:"memory capacity of each simulated device, e.g. 32GiB (the default, an Ascend 910's HBM), 512MiB; a model that does not fit fails naming the buffer"`
	Eval                *bool                    `json:"eval,omitempty" description:"measure held-out accuracy and loss after each epoch and after training (the eval_accuracy and eval_loss metrics, the accuracy output); default true"`
	LogSteps            int                      `json:"log_steps,omitempty" jsonschema:"minimum=0" description:"print a LossMonitor line every this many steps (0: once per epoch, as in sink mode)"`
	Threads             int                      `json:"threads,omitempty" jsonschema:"minimum=0" description:"compute threads per device (0: the machine's cores divided among the devices)"`
	CollectiveTimeout   sdk.Duration             `json:"collective_timeout,omitempty" description:"how long a rank waits for its peers in a collective before failing (default 60s)"`
	CollectiveBasePort  int                      `json:"collective_base_port,omitempty" jsonschema:"minimum=1,maximum=65535" description:"port of rank 0's collective endpoint; rank r listens on its device_ip, port collective_base_port+r. Default 29500 when the rank table spans several hosts (every server must use the same); a single-host job picks a free range unless this is set"`
	CollectiveTransport string                   `json:"collective_transport,omitempty" jsonschema:"enum=auto|shm|tcp" description:"how ranks exchange gradients: shm (shared memory; every rank on this host), tcp (loopback or network), auto (shm within each server of the rank table, tcp between servers)"`
	ShuffleBuffer       int                      `json:"shuffle_buffer,omitempty" jsonschema:"minimum=-1" description:"dataset.shuffle(buffer_size) after the map (0: the seeds' 10; -1: none, so data_parallel and stand_alone see the same global batches)"`
	Launcher            launch.Launcher          `json:"launcher,omitempty" description:"what starts the rank processes: local (mspipe, on this host), mpirun (Open MPI, on the hosts of a hostfile) or srun (Slurm, inside an allocation); with mpirun and srun the run directory and the rank table must be on a filesystem every host sees"`
	LauncherArgs        []string                 `json:"launcher_args,omitempty" description:"mpirun or srun: extra arguments, appended to mspipe's own as they are (one argument per item, no shell)"`
	Hostfile            string                   `json:"hostfile,omitempty" description:"mpirun: an absolute path to an Open MPI hostfile; default one written in the work directory from the rank table's servers, in table order, with slots=<devices>"`
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
