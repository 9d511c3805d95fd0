package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stage is what every stage implements, built-in or external. The host
// calls Describe once, Validate any number of times and Run at most once per
// process in practice, though an implementation must not rely on that.
type Stage interface {
	// Describe returns the stage's identity, the JSON Schema of its `with`
	// block and its declared outputs.
	Describe(ctx context.Context) (Descriptor, error)
	// Validate checks a `with` block, as far as it is known before the run
	// (see ValidateRequest), and lists every problem found; a nil error
	// with no problems means it is acceptable. The error is for failures
	// to check at all.
	Validate(ctx context.Context, req ValidateRequest) ([]Problem, error)
	// Run executes the stage. It calls emit for every event as it happens
	// (emit is safe for concurrent use and must not be called after Run
	// returns) and returns the outputs, whose keys and types match the
	// descriptor's outputs. Run stops early when ctx is done.
	Run(ctx context.Context, req RunRequest, emit func(Event)) (outputs map[string]any, err error)
}

// Info is how a built-in stage registers with the host's registry
// (plugins/host.Registry). New must have no side effects: it is called only
// when the stage is served or described.
type Info struct {
	Name string       // stage name, e.g. "exec", "npu/train"
	New  func() Stage // returns a fresh implementation
	// Reusable says that one plugin process may run this stage several
	// times, one run after another: its Run leaves no state behind in the
	// process (no globals, environment, working directory, limits or
	// goroutines that outlive it), and it reports through events rather
	// than its stdout and stderr, which reach mspipe apart from the reply
	// and could land in the log of the stage before or after. mspipe then keeps a process that
	// finished a run cleanly for the next stage of the same kind instead of
	// starting another, which saves the start of a process per stage.
	Reusable bool
}

// Descriptor is what a stage says about itself.
type Descriptor struct {
	Name        string          // stage name used in `uses:`, e.g. "npu/train"
	Version     string          // the stage's own version, part of the cache key
	Description string          // one sentence for `mspipe plugins` and editors
	WithSchema  json.RawMessage // JSON Schema (2020-12) of the `with` block
	Outputs     []OutputSpec    // declared outputs
	// ProtocolVersions lists the protocol versions the stage speaks. Empty
	// means [ProtocolVersion] only.
	ProtocolVersions []int
}

// OutputSpec declares one output of a stage.
type OutputSpec struct {
	// Name is the key under `stages.<id>.outputs`. The name "*" declares
	// that outputs with other names may appear, all of type Type.
	Name string
	// Type is one of the Type* constants.
	Type        string
	Description string
}

// Output types of an [OutputSpec]. Values are checked by the host: int is a
// JSON integer (int64), float any JSON number (delivered as float64), path a
// string naming a file or directory (made absolute against the stage's work
// dir), list a JSON array, map a JSON object, any anything.
const (
	TypeString = "string"
	TypeInt    = "int"
	TypeFloat  = "float"
	TypeBool   = "bool"
	TypePath   = "path"
	TypeList   = "list"
	TypeMap    = "map"
	TypeAny    = "any"
)

// OutputTypes lists the valid [OutputSpec] types.
func OutputTypes() []string {
	return []string{TypeString, TypeInt, TypeFloat, TypeBool, TypePath, TypeList, TypeMap, TypeAny}
}

// Problem is one thing wrong with a `with` block.
type Problem struct {
	// Path is a JSON pointer (RFC 6901) into the `with` block, "" for the
	// whole block, e.g. "/command/0".
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// JoinProblems renders problems as one line, "; " between them ("" for none).
func JoinProblems(problems []Problem) string {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.String()
	}
	return strings.Join(msgs, "; ")
}

// ValidateRequest is what the host knows of a stage before it runs.
type ValidateRequest struct {
	// With holds the static values of the `with` block and the `${{ }}`
	// values the host resolved before the run (params, cluster).
	With map[string]any
	// Cluster is the cluster the stage will run on; Devices is 0 when it
	// is known only at run time.
	Cluster Cluster
	// Unknown lists the top-level keys of the `with` block whose values
	// are known only at run time; they are not in With.
	Unknown []string
}

// RunRequest is everything a stage needs to run once.
type RunRequest struct {
	RunID   string         // the pipeline run
	StageID string         // the stage's key in the spec
	With    map[string]any // the resolved `with` block
	WorkDir string         // the stage's own directory; exists
	Cluster Cluster        // devices the stage may use
	Attempt int            // 1 for the first run of this stage in this run
	Env     map[string]string
}

// Cluster describes the (simulated) devices a stage may use.
type Cluster struct {
	Devices   int
	RankTable string // path of an HCCL rank table, empty when none
}

// Event is one thing a running stage reports. Exactly one of the pointers is
// set.
type Event struct {
	Time     time.Time
	Log      *LogEvent
	Progress *ProgressEvent
	Metric   *MetricEvent
	Artifact *ArtifactEvent
	Step     *StepEvent
}

// LogEvent is a structured log record.
type LogEvent struct {
	Level   Level
	Message string
	Fields  map[string]any // nil when none
}

// RecordField marks a log record as a record for programs (its value names
// the kind, such as "shrink"): the message is the whole sentence for
// people, so the console and the stage's log show the message alone, and
// only the run's events log keeps the fields. Other records show their
// fields after the message as key=value.
const RecordField = "record"

// ProgressEvent says how much of the stage's work is done.
type ProgressEvent struct {
	Done, Total int64 // Total is 0 when unknown
	Unit        string
	Message     string
}

// MetricEvent is one scalar measurement, e.g. a training loss.
type MetricEvent struct {
	Name  string
	Value float64
	Step  int64
}

// ArtifactEvent announces a file the stage produced.
type ArtifactEvent struct {
	Name   string
	Path   string // absolute or relative to the work dir
	SHA256 string // lower-case hex
}

// StepEvent is one finished training step on one rank. The step that ends
// an epoch has EpochEnd set: it is the epoch event.
type StepEvent struct {
	Rank        int
	Epoch, Step int64 // 1-based; Step counts within the epoch
	// GlobalStep counts the steps so far, those before a resume
	// included; a training continues the count of the checkpoint it starts
	// from (npu/train: the optimizer's global_step). TotalSteps is the
	// global step at which the job ends (0 when unknown).
	GlobalStep, TotalSteps int64
	Loss                   float64
	LearningRate           float64
	ImagesPerSecond        float64 // the rank's throughput over its epoch so far
	DeviceMemory           int64   // bytes in use on the rank's device
	EpochEnd               bool
}

// Progress returns the step as progress of the whole job, in steps.
func (s StepEvent) Progress() ProgressEvent {
	return ProgressEvent{
		Done: s.GlobalStep, Total: s.TotalSteps, Unit: "step",
		Message: s.progressMessage(),
	}
}

// progressMessage is what a live view shows after a step's bar: the epoch,
// the loss and, when known, the device's throughput.
func (s StepEvent) progressMessage() string {
	msg := fmt.Sprintf("epoch %d, loss %s", s.Epoch, strconv.FormatFloat(s.Loss, 'g', -1, 32))
	if s.ImagesPerSecond > 0 {
		msg += fmt.Sprintf(", %.0f images/s per device", s.ImagesPerSecond)
	}
	return msg
}

// Level is the severity of a [LogEvent].
type Level int8

// Log levels, in increasing severity.
const (
	LevelDebug Level = iota - 1
	LevelInfo
	LevelWarn
	LevelError
)

func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "debug"
	case LevelInfo:
		return "info"
	case LevelWarn:
		return "warn"
	case LevelError:
		return "error"
	}
	return "info"
}
