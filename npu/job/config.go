package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/parallel"
)

// Stage is the `uses` name of the built-in stage that runs rank jobs
// (stages/npu/train), for those that read its `with` block without it,
// such as mspipe plan.
const Stage = "npu/train"

// Command is the hidden mspipe subcommand a rank process runs, with the
// path of the job's ConfigFile as its argument.
const Command = "__npu-worker"

// ConfigFile is the name of the job's Config in its work directory;
// ResultFile the name of a rank's Result in its device directory.
const (
	ConfigFile = "worker.json"
	ResultFile = "result.json"
)

// DefaultCollectiveTimeout bounds every wait for a peer rank when the
// stage sets no other.
const DefaultCollectiveTimeout = 60 * time.Second

// Config is a training job as every rank runs it: resolved and typed by
// the stage, once. A zero field takes the trainer's default (see
// trainer.Defaults) unless it says otherwise.
type Config struct {
	// What is trained, and how it is split.
	Model string        `json:"model"`
	Mode  parallel.Mode `json:"mode"`
	// Strategy is what split ranks run: the user's (semi_auto_parallel)
	// or the searched one (auto_parallel).
	Strategy  parallel.Strategy `json:"strategy,omitempty"`
	FullBatch bool              `json:"full_batch,omitempty"`
	// Pipeline parallel (MindSpore's pipeline_stages, micro_size and
	// pipeline_stage): the network cut into PipelineStages stages, each
	// run by devices/PipelineStages ranks (rank r on stage r/(devices/K)),
	// every step in MicroSize micro-batches, scheduled by PipelineSchedule
	// ("1f1b" or "gpipe"); PipelineStage maps operators to stages.
	PipelineStages   int            `json:"pipeline_stages,omitempty"`
	MicroSize        int            `json:"micro_size,omitempty"`
	PipelineSchedule string         `json:"pipeline_schedule,omitempty"`
	PipelineStage    map[string]int `json:"pipeline_stage,omitempty"`
	// ParallelOptimizer splits the weight update and the optimizer
	// moments over each parameter's data-parallel ranks (MindSpore's
	// enable_parallel_optimizer); OptimizerShardSize is
	// optimizer_weight_shard_size (0: the whole data-parallel group).
	ParallelOptimizer  bool `json:"enable_parallel_optimizer,omitempty"`
	OptimizerShardSize int  `json:"optimizer_weight_shard_size,omitempty"`
	// DatasetStrategy is dataset_strategy's tuple form (nil: unset): the
	// split lists of the images and of the labels.
	DatasetStrategy [][]int `json:"dataset_strategy,omitempty"`
	// DeviceMemory is each device's capacity in bytes (0: the trainer's
	// default).
	DeviceMemory int64 `json:"device_memory,omitempty"`

	// Data and optimisation.
	DataDir          string  `json:"data_dir"`
	Epochs           int     `json:"epochs,omitempty"`
	BatchSize        int     `json:"batch_size,omitempty"` // per device
	GradAccumulation int     `json:"grad_accumulation_step,omitempty"`
	LearningRate     float64 `json:"learning_rate,omitempty"`
	// Momentum 0 trains without momentum.
	Momentum      float64 `json:"momentum"`
	WeightDecay   float64 `json:"weight_decay,omitempty"`
	Schedule      string  `json:"lr_schedule,omitempty"`
	WarmupEpochs  int     `json:"warmup_epochs,omitempty"`
	Seed          uint64  `json:"seed"`
	ShuffleBuffer int     `json:"shuffle_buffer,omitempty"`
	// Threads are compute threads per device (0: the machine's cores
	// divided among the ranks).
	Threads  int  `json:"threads,omitempty"`
	Eval     bool `json:"eval,omitempty"`
	LogSteps int  `json:"log_steps,omitempty"`

	// Checkpoints.
	Prefix              string `json:"prefix,omitempty"`
	SaveCheckpointSteps int    `json:"save_checkpoint_steps,omitempty"`
	KeepCheckpointMax   int    `json:"keep_checkpoint_max,omitempty"`
	// CRCCheck appends MindSpore's crc_num trailer to every checkpoint.
	CRCCheck bool `json:"crc_check,omitempty"`
	// IntegratedSave has rank 0 of a split network save whole tensors.
	IntegratedSave bool `json:"integrated_save,omitempty"`
	// AsyncSave writes checkpoints in a writer goroutine (async_save);
	// ExceptionSave writes the state before a failing step (exception_save).
	AsyncSave     bool `json:"async_save,omitempty"`
	ExceptionSave bool `json:"exception_save,omitempty"`
	// Fault injects a failure (for tests and demos), or is nil.
	Fault *Fault `json:"fault,omitempty"`
	// InitFile is a checkpoint every rank starts from; InitDir a directory
	// with device{i}/ckpt_{i}/ per rank. At most one is set.
	InitFile string `json:"init_file,omitempty"`
	InitDir  string `json:"init_dir,omitempty"`
	// InitResumes says the init is a checkpoint of this same training
	// that the job resumes after (npu/train's init_resumes, and each job
	// after a shrink): see trainer.Config.InitResumes.
	InitResumes bool `json:"init_resumes,omitempty"`
	// StrategyFile is where rank 0 writes the strategy file ("" for none).
	StrategyFile string `json:"strategy_file,omitempty"`

	// The collective of a job of several ranks.
	GradientsMean      bool `json:"gradients_mean,omitempty"`
	ParameterBroadcast bool `json:"parameter_broadcast,omitempty"`
	// CollectiveTimeout bounds every wait for a peer (in nanoseconds in
	// the file; 0: DefaultCollectiveTimeout).
	CollectiveTimeout time.Duration `json:"collective_timeout,omitempty"`
	Transport         Transport     `json:"collective_transport"`
	// BasePort is the port of rank 0's collective endpoint; rank r listens
	// on its rank table device_ip, port BasePort+r.
	BasePort int `json:"base_port,omitempty"`
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

// Transport is a collective.Transport written by its name ("auto", "shm",
// "tcp") in the config file.
type Transport collective.Transport

// MarshalText returns the transport's name.
func (t Transport) MarshalText() ([]byte, error) {
	return []byte(collective.Transport(t).String()), nil
}

// UnmarshalText parses a transport's name.
func (t *Transport) UnmarshalText(text []byte) error {
	v, err := collective.ParseTransport(string(text))
	if err != nil {
		return err
	}
	*t = Transport(v)
	return nil
}

// Engine reports whether the job runs on the operator-parallel engine
// (npu/shard): UsesEngine's jobs, and every job with the parallel
// optimizer, which the engine implements.
func (c *Config) Engine() bool {
	return UsesEngine(c.Model, c.Mode) || c.ParallelOptimizer
}

// timeout is the collective timeout the ranks use.
func (c *Config) timeout() time.Duration {
	if c.CollectiveTimeout > 0 {
		return c.CollectiveTimeout
	}
	return DefaultCollectiveTimeout
}

// WriteConfig writes cfg to path, atomically.
func WriteConfig(path string, cfg Config) error {
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("job config: %w", err)
	}
	if err := atomicfile.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("job config: %w", err)
	}
	return nil
}

// decodeConfig decodes the Config read from path; unknown fields are
// refused, so that a config of another version fails naming the field
// instead of training with defaults.
func decodeConfig(raw []byte, path string) (Config, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("worker config %s: %w", path, err)
	}
	return cfg, nil
}

// Result is what a rank process leaves in its device directory
// (ResultFile).
type Result struct {
	Rank         int     `json:"rank"`
	Loss         float64 `json:"loss"`
	Accuracy     float64 `json:"accuracy"` // -1 when this rank did not evaluate
	GlobalStep   int     `json:"global_step"`
	Seconds      float64 `json:"seconds"`
	ImagesPerSec float64 `json:"images_per_second"`
	Checkpoint   string  `json:"checkpoint"`
	ResumedFrom  string  `json:"resumed_from,omitempty"`
	PeakMemory   int64   `json:"peak_device_memory"` // bytes
	// PeakSaveStaging is the most host memory async_save's staged
	// checkpoint held (bytes; one checkpoint of this rank at most).
	PeakSaveStaging int64 `json:"peak_save_staging,omitempty"`
	// SaveBlocked is the time checkpoint saves held training up in all
	// (seconds; with async_save the snapshots and the waits for the
	// previous write).
	SaveBlocked float64 `json:"save_blocked_seconds,omitempty"`
	// PeakHostMemory is the most resident memory the rank process held
	// (bytes; Linux's ru_maxrss when the result is written): training's
	// buffers, async_save's staging buffer, the Go heap. 0 when unknown.
	PeakHostMemory int64 `json:"peak_host_memory,omitempty"`
	// CPUSeconds is the CPU time (user and system) the rank process used
	// in all, start-up and the writer goroutine included. 0 when unknown.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
}

// ReadResult reads the Result a rank left in dir.
func ReadResult(dir string) (Result, error) {
	var r Result
	data, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", ResultFile, err)
	}
	return r, nil
}
