package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
)

// Status is the state of a run or of one stage.
type Status string

// The states of the run.json state machine.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusSkipped   Status = "skipped"
	StatusCached    Status = "cached"
	StatusCancelled Status = "cancelled"
	// StatusInterrupted is never written to run.json: readers (Store.List,
	// Store.Open) report it for a run that run.json says is running but
	// whose owner holds no lock any more (it was killed), and for the
	// stages it was running.
	StatusInterrupted Status = "interrupted"
)

var validStatus = map[Status]bool{
	StatusPending: true, StatusRunning: true, StatusSucceeded: true, StatusFailed: true,
	StatusSkipped: true, StatusCached: true, StatusCancelled: true,
}

// Done reports whether a stage in this state has finished in a way its
// dependents can build on.
func (s Status) Done() bool {
	return s == StatusSucceeded || s == StatusCached || s == StatusSkipped
}

// stateVersion is the format version of run.json.
const stateVersion = 1

// RunState is run.json: the whole state of one run.
type RunState struct {
	Version  int    `json:"version"`
	ID       string `json:"id"`
	Pipeline string `json:"pipeline"`  // the spec's name
	SpecFile string `json:"spec_file"` // the spec as given to mspipe run
	SpecDir  string `json:"spec_dir"`  // absolute; relative paths in the spec resolve here
	// SpecSHA256 is the digest of the run's copy of its spec (pipeline.yaml
	// in the run directory) when the run started; resume says when the
	// copy was edited since. Empty in runs of older versions.
	SpecSHA256 string                 `json:"spec_sha256,omitempty"`
	Params     map[string]any         `json:"params"` // every param's value for this run
	Status     Status                 `json:"status"`
	Created    time.Time              `json:"created"`
	Updated    time.Time              `json:"updated"`
	Finished   *time.Time             `json:"finished,omitempty"`
	Error      string                 `json:"error,omitempty"`
	Stages     map[string]*StageState `json:"stages"`
	Order      []string               `json:"order"` // stage ids in topological order
}

// StageState is one stage's entry in run.json.
type StageState struct {
	Status     Status            `json:"status"`
	Uses       string            `json:"uses"`
	Attempts   int               `json:"attempts,omitempty"`
	Started    *time.Time        `json:"started,omitempty"`
	Finished   *time.Time        `json:"finished,omitempty"`
	Seconds    float64           `json:"seconds,omitempty"`
	CacheKey   string            `json:"cache_key,omitempty"`
	Plugin     string            `json:"plugin,omitempty"`      // plugin identity in the cache key: name, version, what it was built from
	CachedFrom string            `json:"cached_from,omitempty"` // run id the outputs came from
	With       map[string]any    `json:"with,omitempty"`        // resolved inputs
	Outputs    map[string]any    `json:"outputs,omitempty"`
	Artifacts  map[string]string `json:"artifacts,omitempty"` // path output name -> content sha256
	Reason     string            `json:"reason,omitempty"`    // why skipped, failed or not run
	Log        string            `json:"log,omitempty"`       // stage log, relative to the run dir
}

// Terminal reports whether the run ended (in any way).
func (r *RunState) Terminal() bool {
	return r.Status != StatusRunning && r.Status != StatusPending
}

// StatusMap returns each stage's status.
func (r *RunState) StatusMap() map[string]Status {
	out := make(map[string]Status, len(r.Stages))
	for id, s := range r.Stages {
		out[id] = s.Status
	}
	return out
}

// saveState writes run.json atomically.
func saveState(dir string, st *RunState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode run state: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, "run.json"), append(data, '\n'), 0o644)
}

// maxStateBytes bounds the run.json LoadState reads: a state holds outputs
// and resolved inputs, never bulk data.
const maxStateBytes = 64 << 20

// LoadState reads and checks a run directory's run.json. A file that does
// not parse, has unknown fields or states, or is inconsistent is reported as
// ErrCorruptState rather than trusted.
func LoadState(dir string) (*RunState, error) {
	path := filepath.Join(dir, "run.json")
	// A run.json that is a FIFO or a device would block or never end:
	// only a bounded regular file is read.
	data, err := userfile.ReadFile(context.Background(), path, maxStateBytes)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%s: %w", dir, ErrRunNotFound)
		}
		return nil, fmt.Errorf("read run state %s: %w", path, err)
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s", path, ErrCorruptState, fmt.Sprintf(format, args...))
	}
	var st RunState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrCorruptState, err)
	}
	if dec.More() {
		return nil, corrupt("trailing data after the JSON object")
	}
	if st.Version != stateVersion {
		return nil, corrupt("version %d, this mspipe reads version %d", st.Version, stateVersion)
	}
	if st.ID == "" || st.ID != filepath.Base(dir) {
		return nil, corrupt("id %q does not match the run directory %q", st.ID, filepath.Base(dir))
	}
	if !validStatus[st.Status] {
		return nil, corrupt("unknown run status %q", st.Status)
	}
	if len(st.Order) != len(st.Stages) {
		return nil, corrupt("order lists %d stages but stages holds %d", len(st.Order), len(st.Stages))
	}
	for _, id := range st.Order {
		s, ok := st.Stages[id]
		if !ok || s == nil {
			return nil, corrupt("stage %q is in order but has no state", id)
		}
		if !validStatus[s.Status] {
			return nil, corrupt("stage %q: unknown status %q", id, s.Status)
		}
		if (s.Status == StatusSucceeded || s.Status == StatusCached) && s.CacheKey == "" {
			return nil, corrupt("stage %q: %s without a cache key", id, s.Status)
		}
		s.Outputs, _ = normalizeNumbers(s.Outputs).(map[string]any)
		s.With, _ = normalizeNumbers(s.With).(map[string]any)
	}
	st.Params, _ = normalizeNumbers(st.Params).(map[string]any)
	return &st, nil
}

// normalizeNumbers turns json.Number into int (when integral) or float64,
// so values read back from run.json have the types expressions expect.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		if x == nil {
			return map[string]any{}
		}
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
		return x
	}
	return v
}
