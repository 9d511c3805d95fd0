package sdk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// Stage is a stage whose `with` block decodes into W, a struct. It
// implements plugins.Stage: Describe derives the JSON Schema from W, which
// mspipe checks every block against; Validate decodes a block strictly into
// W and calls Check and CheckCluster; Run does the same and calls Execute.
type Stage[W any] struct {
	Name        string // stage name used in `uses:`, e.g. "acme/augment"
	Version     string // the stage's version, part of the cache key
	Description string // one sentence
	Outputs     []plugins.OutputSpec
	// Defaults holds the default of every field that is not zero in it:
	// the schema's `default` keywords come from it, and Validate and Run
	// fill absent fields with them (see SchemaWithDefaults).
	Defaults W
	// Check, if set, adds checks the schema cannot express.
	Check func(with W) []plugins.Problem
	// CheckCluster, if set, adds checks that need the cluster the stage
	// runs on, such as a shard strategy against the device count. Validate
	// calls it after Check with what mspipe knows before the run: cluster
	// (Devices 0 when it is known only at run time) and unknown, the
	// top-level keys whose values are known only at run time, which are
	// absent from with (a field of one holds its default or zero value, so
	// skip what depends on it). Run calls it with the run's cluster and no
	// unknown keys; a problem fails the run as Check's do.
	CheckCluster func(with W, cluster plugins.Cluster, unknown []string) []plugins.Problem
	// Execute runs the stage. It returns the outputs declared in Outputs.
	Execute func(ctx context.Context, sc Context, with W) (map[string]any, error)
}

var _ plugins.Stage = Stage[struct{}]{}

// Describe returns the stage's descriptor with the schema derived from W.
func (s Stage[W]) Describe(context.Context) (plugins.Descriptor, error) {
	schema, err := SchemaWithDefaults(s.Defaults)
	if err != nil {
		return plugins.Descriptor{}, fmt.Errorf("stage %q: %w", s.Name, err)
	}
	return plugins.Descriptor{
		Name:             s.Name,
		Version:          s.Version,
		Description:      s.Description,
		WithSchema:       schema,
		Outputs:          s.Outputs,
		ProtocolVersions: []int{plugins.ProtocolVersion},
	}, nil
}

// Validate decodes a `with` block into W and runs Check, then CheckCluster
// with the request's cluster and unknown keys. Keywords of the schema
// (required, minimum, pattern, ...) are mspipe's to check; see the package
// documentation. A problem at or below an unknown key is dropped: the
// value checked there was a default, not the one the stage will get.
func (s Stage[W]) Validate(_ context.Context, req plugins.ValidateRequest) ([]plugins.Problem, error) {
	w, bad, err := s.decodeStrict(req.With)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return knownProblems([]plugins.Problem{*bad}, req.Unknown), nil
	}
	var problems []plugins.Problem
	if s.Check != nil {
		problems = s.Check(w)
	}
	if s.CheckCluster != nil {
		problems = append(problems, s.CheckCluster(w, req.Cluster, req.Unknown)...)
	}
	return knownProblems(problems, req.Unknown), nil
}

// knownProblems drops the problems at or below a key in unknown.
func knownProblems(problems []plugins.Problem, unknown []string) []plugins.Problem {
	if len(unknown) == 0 {
		return problems
	}
	out := problems[:0:0]
	for _, p := range problems {
		if !belowUnknown(p.Path, unknown) {
			out = append(out, p)
		}
	}
	return out
}

func belowUnknown(path string, unknown []string) bool {
	if path == "" {
		return false
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	key := strings.ReplaceAll(strings.ReplaceAll(first, "~1", "/"), "~0", "~")
	return slices.Contains(unknown, key)
}

// Run decodes the `with` block (filling in schema defaults), runs Check
// and calls Execute.
func (s Stage[W]) Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error) {
	if s.Execute == nil {
		return nil, fmt.Errorf("stage %q has no Execute function", s.Name)
	}
	with, problems, err := s.decode(req.With)
	if err != nil {
		return nil, err
	}
	if len(problems) == 0 && s.CheckCluster != nil {
		problems = s.CheckCluster(with, req.Cluster, nil)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("invalid with: %s", plugins.JoinProblems(problems))
	}
	return s.Execute(ctx, NewContext(req, emit), with)
}

// decode fills in the schema's defaults, decodes with strictly into a W
// (unknown fields and wrong types are problems) and runs Check. The error
// is for a broken W, not a bad block.
func (s Stage[W]) decode(with map[string]any) (W, []plugins.Problem, error) {
	w, bad, err := s.decodeStrict(with)
	switch {
	case err != nil:
		return w, nil, err
	case bad != nil:
		return w, []plugins.Problem{*bad}, nil
	case s.Check == nil:
		return w, nil, nil
	}
	return w, s.Check(w), nil
}

// decodeStrict fills in the schema's defaults and decodes with strictly
// into a W; bad is set when the block does not fit W.
func (s Stage[W]) decodeStrict(with map[string]any) (w W, bad *plugins.Problem, err error) {
	schema, err := schemaMap(reflect.ValueOf(&s.Defaults).Elem())
	if err != nil {
		return w, nil, fmt.Errorf("stage %q: %w", s.Name, err)
	}
	with, _ = applyDefaults(schema, with).(map[string]any)
	data, err := plugins.EncodeJSON(with)
	if err != nil {
		return w, &plugins.Problem{Message: err.Error()}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		p := decodeProblem(err)
		return w, &p, nil
	}
	return w, nil, nil
}

func decodeProblem(err error) plugins.Problem {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		path := ""
		if typeErr.Field != "" {
			path = "/" + strings.ReplaceAll(typeErr.Field, ".", "/")
		}
		return plugins.Problem{Path: path, Message: fmt.Sprintf("want %s, got %s", typeErr.Type, typeErr.Value)}
	}
	return plugins.Problem{Message: strings.TrimPrefix(err.Error(), "json: ")}
}

// Context is what a running stage uses to report: log records, progress,
// metrics and artifacts. It also carries the run request. Its methods are
// safe for concurrent use.
type Context struct {
	req  plugins.RunRequest
	emit func(plugins.Event)
}

// NewContext returns a Context over a run request and an event sink; it is
// what Run passes to Execute, and lets tests call Execute directly.
func NewContext(req plugins.RunRequest, emit func(plugins.Event)) Context {
	if emit == nil {
		emit = func(plugins.Event) {}
	}
	return Context{req: req, emit: emit}
}

// Request returns the run request: run and stage ids, work dir, cluster,
// attempt and environment.
func (c Context) Request() plugins.RunRequest { return c.req }

// WorkDir returns the stage's own directory.
func (c Context) WorkDir() string { return c.req.WorkDir }

// Log sends a log record; kv are alternating keys (strings) and values.
// The console shows them after msg as key=value, unless kv has the key
// [plugins.RecordField]: such a record's msg is its whole sentence for
// people, and its fields are for programs reading the run's events log.
func (c Context) Log(level plugins.Level, msg string, kv ...any) {
	var fields map[string]any
	if len(kv) > 0 {
		fields = make(map[string]any, (len(kv)+1)/2)
		for i := 0; i < len(kv); i += 2 {
			key, ok := kv[i].(string)
			if !ok || i+1 == len(kv) {
				fields["!BADKEY"] = kv[i]
				i--
				continue
			}
			fields[key] = kv[i+1]
		}
	}
	c.emit(plugins.Event{Time: time.Now(), Log: &plugins.LogEvent{Level: level, Message: msg, Fields: fields}})
}

// Info sends a log record at info level.
func (c Context) Info(msg string, kv ...any) { c.Log(plugins.LevelInfo, msg, kv...) }

// Warn sends a log record at warn level.
func (c Context) Warn(msg string, kv ...any) { c.Log(plugins.LevelWarn, msg, kv...) }

// Progress reports done of total units of work (total 0 when unknown).
func (c Context) Progress(done, total int64, unit, message string) {
	c.emit(plugins.Event{Time: time.Now(), Progress: &plugins.ProgressEvent{Done: done, Total: total, Unit: unit, Message: message}})
}

// Metric reports one scalar measurement at a step.
func (c Context) Metric(name string, value float64, step int64) {
	c.emit(plugins.Event{Time: time.Now(), Metric: &plugins.MetricEvent{Name: name, Value: value, Step: step}})
}

// Step reports a finished training step of one rank; the host turns
// rank 0's steps into the stage's progress.
func (c Context) Step(s plugins.StepEvent) {
	c.emit(plugins.Event{Time: time.Now(), Step: &s})
}

// Artifact hashes the file at path (absolute or relative to the work dir)
// and announces it.
func (c Context) Artifact(name, path string) error {
	full := path
	if !filepath.IsAbs(full) {
		full = filepath.Join(c.req.WorkDir, full)
	}
	f, err := os.Open(full)
	if err != nil {
		return fmt.Errorf("artifact %q: %w", name, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("artifact %q: read %s: %w", name, full, err)
	}
	c.emit(plugins.Event{Time: time.Now(), Artifact: &plugins.ArtifactEvent{Name: name, Path: path, SHA256: hex.EncodeToString(h.Sum(nil))}})
	return nil
}
