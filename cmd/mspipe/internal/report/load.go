package report

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/spec"
)

// Run is everything a report shows about one run.
type Run struct {
	State *pipeline.RunState
	// Needs holds each stage's direct needs, read from the run's resolved
	// pipeline.yaml; nil when that copy could not be read (the graph then
	// shows the stages without edges and Notes says why).
	Needs map[string][]string
	// Steps holds each stage's training steps per rank, in global-step
	// order; a step seen twice (a resumed stage) keeps its last value. A
	// cached stage's steps are those of the run that trained it
	// (StepsFrom).
	Steps map[string]map[int][]Step
	// Evals holds each training stage's evaluations on the test split,
	// after every epoch and after its last step, in global-step order
	// (a cached stage's from StepsFrom's run, as its steps).
	Evals map[string][]Eval
	// Shrinks holds each elastic training stage's shrinks (npu/train's
	// on_failure: shrink), in order.
	Shrinks map[string][]Shrink
	// StepsFrom names, for each cached stage whose steps were read from
	// the run that produced its outputs, that run's id.
	StepsFrom map[string]string
	// Continues maps a training stage to the training stage it continues
	// from: the one its `init` checkpoint came from, through checkpoint
	// stages (train → integrate → reshard → retrain).
	Continues  map[string]string
	Strategies []StageStrategy
	Manifests  []StageManifest
	Notes      []string // parts of the run that could not be read, and why
}

// Step is one training step of one rank, as its step event reported it.
type Step struct {
	GlobalStep      int64
	Epoch           int64
	Loss            float64
	LearningRate    float64
	ImagesPerSecond float64 // this rank's, over its epoch so far
	// AfterStepMemory is the device memory in use after the step, in
	// bytes: not the high-water mark within the step (the stage's
	// peak_device_memory output is that).
	AfterStepMemory int64
}

// Eval is one evaluation of a training stage on the test split, after
// global step GlobalStep (the end of an epoch, or the last step).
type Eval struct {
	GlobalStep int64
	Accuracy   float64
	Loss       float64 // NaN when the log has no eval_loss for the step
}

// Shrink is one shrink of an elastic training stage, as its shrink
// record in the events log says: rank LostRank died or was declared dead
// at global step FailedStep, and training went on after the checkpoint of
// global step ResumedStep on ToDevices devices instead of FromDevices.
type Shrink struct {
	Generation              int
	LostRank                int
	ResumedStep, FailedStep int64
	FromDevices, ToDevices  int
	FromLayout, ToLayout    string
	StepsRedone             int64
	SecondsLost             float64
}

// StageStrategy is the strategy file a stage wrote (its strategy output).
type StageStrategy struct {
	Stage string
	Path  string
	File  *parallel.StrategyFile
}

// StageManifest is the tensor manifest a stage wrote (its manifest output),
// when it is a reshard manifest.
type StageManifest struct {
	Stage    string
	Path     string
	Manifest *reshard.Manifest
}

// Limits on what Load reads: events.jsonl grows with steps and ranks, and a
// run directory is data anyone may have edited.
const (
	maxEventsBytes   = 1 << 30
	maxEventLineSize = 1 << 20
	// maxSteps bounds the steps kept in memory (about 100 bytes each):
	// 2,032 ranks of 1,000 steps fit.
	maxSteps = 1 << 21
	// maxShrinks bounds the shrinks kept per stage.
	maxShrinks = 1000
)

// Load reads what the report of the run in runDir shows. st is the run's
// state as the store returns it. Files named by run.json (strategy files,
// manifests) are read only when they are regular files inside runsDir:
// a cached stage's outputs live in an earlier run of the same store.
// Optional parts that cannot be read become Notes; only an unreadable
// events log that exists is an error.
func Load(ctx context.Context, runsDir, runDir string, st *pipeline.RunState) (*Run, error) {
	r := &Run{State: st, Steps: map[string]map[int][]Step{}, StepsFrom: map[string]string{}}
	r.Needs = r.readNeeds(runDir)
	steps, evals, shrinks, err := r.readSteps(ctx, filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		return nil, err
	}
	r.Steps, r.Evals, r.Shrinks = steps, evals, shrinks
	r.readCachedSteps(ctx, runsDir)
	r.Continues = continues(st, r.Needs)
	for _, sid := range st.Order {
		ss := st.Stages[sid]
		if p, ok := ss.Outputs["strategy"].(string); ok && p != "" {
			path, err := inside(runsDir, p)
			if err == nil {
				var f *parallel.StrategyFile
				if f, err = parallel.ReadStrategies(path); err == nil {
					r.Strategies = append(r.Strategies, StageStrategy{Stage: sid, Path: p, File: f})
				}
			}
			if err != nil {
				r.note("stage %s: strategy: %v", sid, err)
			}
		}
		// Only the checkpoint stages write reshard manifests; cifar/prepare
		// has a manifest.json of its own kind.
		if p, ok := ss.Outputs["manifest"].(string); ok && p != "" && strings.HasPrefix(ss.Uses, "ckpt/") {
			path, err := inside(runsDir, p)
			if err == nil {
				var m *reshard.Manifest
				if m, err = reshard.ReadManifest(filepath.Dir(path)); err == nil {
					r.Manifests = append(r.Manifests, StageManifest{Stage: sid, Path: p, Manifest: m})
				}
			}
			if err != nil {
				r.note("stage %s: manifest: %v", sid, err)
			}
		}
	}
	return r, nil
}

func (r *Run) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// inside returns path when it names something inside root (after
// resolving symbolic links), else an error wrapping userfile.ErrOutside.
func inside(root, path string) (string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	absPath, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(absRoot, absPath)
	if err != nil {
		return "", fmt.Errorf("%s: %w %s", path, userfile.ErrOutside, root)
	}
	return userfile.Within(absRoot, rel)
}

// readNeeds reads the stage graph from the run's copy of its spec.
func (r *Run) readNeeds(runDir string) map[string][]string {
	path := filepath.Join(runDir, "pipeline.yaml")
	data, err := userfile.ReadFile(context.Background(), path, spec.MaxFileSize)
	if err != nil {
		r.note("stage graph: %v", err)
		return nil
	}
	p, problems := spec.Parse(path, data)
	if problems.HasErrors() {
		r.note("stage graph: %s does not parse: %v", path, problems.Err())
		return nil
	}
	needs := map[string][]string{}
	for _, s := range p.Stages {
		if _, ok := r.State.Stages[s.ID]; ok {
			needs[s.ID] = append([]string(nil), s.Needs...)
		}
	}
	return needs
}

// stepEvent is the part of an events.jsonl line a report uses.
type stepEvent struct {
	Stage        string    `json:"stage"`
	Event        string    `json:"event"`
	Rank         int       `json:"rank"`
	Epoch        int64     `json:"epoch"`
	GlobalStep   int64     `json:"global_step"`
	Loss         lossValue `json:"loss"`
	LearningRate float64   `json:"lr"`
	ImagesPerSec float64   `json:"images_per_second"`
	AfterStep    int64     `json:"after_step_device_memory"`
	DeviceMemory int64     `json:"device_memory"` // the same, in logs written before it was named so
	// A metric event's (npu/train reports each evaluation as two).
	Name  string    `json:"name"`
	Value lossValue `json:"value"`
	Step  int64     `json:"step"`
}

// lossValue is a loss as the events log holds it: a JSON number, or the
// strings "NaN", "+Inf" and "-Inf" zerolog writes for what JSON cannot
// say (a diverged training reports them).
type lossValue float64

func (l *lossValue) UnmarshalJSON(data []byte) error {
	switch string(data) {
	case `"NaN"`:
		*l = lossValue(math.NaN())
	case `"+Inf"`:
		*l = lossValue(math.Inf(1))
	case `"-Inf"`:
		*l = lossValue(math.Inf(-1))
	default:
		var f float64
		if err := json.Unmarshal(data, &f); err != nil {
			return err
		}
		*l = lossValue(f)
	}
	return nil
}

// readSteps collects the step events of events.jsonl, and the
// evaluations (the eval_accuracy and eval_loss metrics). A run without an
// events log (it never started a stage) has no steps; a line that is not
// a step event, does not parse or is too long is passed over: the log is
// for many readers and may end in a line cut short by a kill.
func (r *Run) readSteps(ctx context.Context, path string) (map[string]map[int][]Step, map[string][]Eval, map[string][]Shrink, error) {
	out := map[string]map[int][]Step{}
	f, st, err := userfile.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			r.note("no events log: %s", path)
			return out, nil, nil, nil
		}
		return nil, nil, nil, fmt.Errorf("read events %s: %w", path, err)
	}
	defer f.Close()
	if st.Size() > maxEventsBytes {
		r.note("events log %s is %s: only its first %s are shown", path, bytesize.Format(st.Size()), bytesize.Format(maxEventsBytes))
	}
	marker, metric, shrinkMark := []byte(`"event":"step"`), []byte(`"event":"metric"`), []byte(`"record":"shrink"`)
	shrinks := map[string][]Shrink{}
	byStep := map[string]map[int]map[int64]Step{}
	evals := map[string]map[int64]Eval{}
	br := bufio.NewReaderSize(io.LimitReader(f, maxEventsBytes), 64<<10)
	skipped, kept, dropped := 0, 0, 0
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return nil, nil, nil, ctx.Err()
		}
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.Is(err, errLongLine) {
				skipped++
				continue
			}
			return nil, nil, nil, fmt.Errorf("read events %s: %w", path, err)
		}
		if bytes.Contains(line, metric) {
			readEval(line, evals)
			continue
		}
		if bytes.Contains(line, shrinkMark) {
			readShrink(line, shrinks)
			continue
		}
		if !bytes.Contains(line, marker) {
			continue
		}
		var ev stepEvent
		if json.Unmarshal(line, &ev) != nil || ev.Event != "step" || ev.Stage == "" {
			skipped++
			continue
		}
		ranks := byStep[ev.Stage]
		if ranks == nil {
			ranks = map[int]map[int64]Step{}
			byStep[ev.Stage] = ranks
		}
		steps := ranks[ev.Rank]
		if steps == nil {
			steps = map[int64]Step{}
			ranks[ev.Rank] = steps
		}
		if _, seen := steps[ev.GlobalStep]; !seen {
			if kept == maxSteps {
				dropped++
				continue
			}
			kept++
		}
		steps[ev.GlobalStep] = Step{GlobalStep: ev.GlobalStep, Epoch: ev.Epoch, Loss: float64(ev.Loss),
			LearningRate: ev.LearningRate, ImagesPerSecond: ev.ImagesPerSec, AfterStepMemory: cmp.Or(ev.AfterStep, ev.DeviceMemory)}
	}
	if skipped > 0 {
		r.note("events log %s: %d step lines could not be read and are left out", path, skipped)
	}
	if dropped > 0 {
		r.note("events log: more than %d steps; %d later step lines are left out", maxSteps, dropped)
	}
	for sid, ranks := range byStep {
		out[sid] = map[int][]Step{}
		for rank, steps := range ranks {
			list := make([]Step, 0, len(steps))
			for _, s := range steps {
				list = append(list, s)
			}
			sort.Slice(list, func(i, j int) bool { return list[i].GlobalStep < list[j].GlobalStep })
			out[sid][rank] = list
		}
	}
	return out, sortEvals(evals), shrinks, nil
}

// readShrink adds a shrink record (a log line of an elastic npu/train
// stage) to shrinks, by stage; a line that does not parse is passed over.
func readShrink(line []byte, shrinks map[string][]Shrink) {
	var ev struct {
		Stage       string  `json:"stage"`
		Event       string  `json:"event"`
		Record      string  `json:"record"`
		Generation  int     `json:"shrink"`
		LostRank    int     `json:"lost_rank"`
		ResumedStep int64   `json:"resumed_step"`
		FailedStep  int64   `json:"failed_step"`
		FromDevices int     `json:"from_devices"`
		ToDevices   int     `json:"to_devices"`
		FromLayout  string  `json:"from_layout"`
		ToLayout    string  `json:"to_layout"`
		StepsRedone int64   `json:"steps_redone"`
		SecondsLost float64 `json:"seconds_lost"`
	}
	if json.Unmarshal(line, &ev) != nil || ev.Event != "log" || ev.Record != "shrink" || ev.Stage == "" || len(shrinks[ev.Stage]) >= maxShrinks {
		return
	}
	shrinks[ev.Stage] = append(shrinks[ev.Stage], Shrink{
		Generation: ev.Generation, LostRank: ev.LostRank, ResumedStep: ev.ResumedStep, FailedStep: ev.FailedStep,
		FromDevices: ev.FromDevices, ToDevices: ev.ToDevices, FromLayout: ev.FromLayout, ToLayout: ev.ToLayout,
		StepsRedone: ev.StepsRedone, SecondsLost: ev.SecondsLost,
	})
}

// readEval adds an eval_accuracy or eval_loss metric line to evals, by
// stage and global step; other metrics and lines that do not parse are
// passed over.
func readEval(line []byte, evals map[string]map[int64]Eval) {
	var ev stepEvent
	if json.Unmarshal(line, &ev) != nil || ev.Event != "metric" || ev.Stage == "" || ev.Step < 1 {
		return
	}
	if ev.Name != job.MetricEvalAccuracy && ev.Name != job.MetricEvalLoss {
		return
	}
	byStep := evals[ev.Stage]
	if byStep == nil {
		byStep = map[int64]Eval{}
		evals[ev.Stage] = byStep
	}
	e, ok := byStep[ev.Step]
	if !ok {
		e = Eval{GlobalStep: ev.Step, Accuracy: math.NaN(), Loss: math.NaN()}
	}
	if ev.Name == job.MetricEvalAccuracy {
		e.Accuracy = float64(ev.Value)
	} else {
		e.Loss = float64(ev.Value)
	}
	byStep[ev.Step] = e
}

// sortEvals lists each stage's evaluations that have an accuracy, in
// global-step order.
func sortEvals(evals map[string]map[int64]Eval) map[string][]Eval {
	out := map[string][]Eval{}
	for sid, byStep := range evals {
		for _, e := range byStep {
			if finite(e.Accuracy) {
				out[sid] = append(out[sid], e)
			}
		}
		sort.Slice(out[sid], func(i, j int) bool { return out[sid][i].GlobalStep < out[sid][j].GlobalStep })
	}
	return out
}

// readCachedSteps reads the steps of each cached stage from the events
// log of the run that trained it, when that run is still in runsDir: the
// curves of a rerun are those of the training whose outputs it reused.
func (r *Run) readCachedSteps(ctx context.Context, runsDir string) {
	type logged struct {
		steps   map[string]map[int][]Step
		evals   map[string][]Eval
		shrinks map[string][]Shrink
	}
	byRun := map[string]logged{}
	for _, sid := range r.State.Order {
		ss := r.State.Stages[sid]
		if ss.Status != pipeline.StatusCached || ss.CachedFrom == "" || len(r.Steps[sid]) > 0 || ss.CachedFrom == r.State.ID {
			continue
		}
		lg, ok := byRun[ss.CachedFrom]
		if !ok {
			path, err := inside(runsDir, filepath.Join(runsDir, ss.CachedFrom, "events.jsonl"))
			if err == nil {
				lg.steps, lg.evals, lg.shrinks, err = r.readSteps(ctx, path)
			}
			if err != nil {
				r.note("stage %s: the steps of run %s, which trained it: %v", sid, ss.CachedFrom, err)
			}
			byRun[ss.CachedFrom] = lg
		}
		if len(lg.steps[sid]) > 0 {
			r.Steps[sid] = lg.steps[sid]
			r.StepsFrom[sid] = ss.CachedFrom
			if r.Evals == nil {
				r.Evals = map[string][]Eval{}
			}
			r.Evals[sid] = lg.evals[sid]
			if len(lg.shrinks[sid]) > 0 {
				if r.Shrinks == nil {
					r.Shrinks = map[string][]Shrink{}
				}
				r.Shrinks[sid] = lg.shrinks[sid]
			}
		}
	}
}

// continues finds, for each stage that starts from a checkpoint (an
// `init` input), the training stage that checkpoint came from: the
// nearest stage up its needs that reported steps or is npu/train, passing
// only through checkpoint stages (ckpt/...). Two stages that each need
// the same data stage are separate trainings, not one lineage.
func continues(st *pipeline.RunState, needs map[string][]string) map[string]string {
	out := map[string]string{}
	isTraining := func(sid string) bool { return st.Stages[sid] != nil && st.Stages[sid].Uses == "npu/train" }
	for _, sid := range st.Order {
		ss := st.Stages[sid]
		if ss == nil || !isTraining(sid) {
			continue
		}
		if init, _ := ss.With["init"].(string); init == "" {
			continue
		}
		seen := map[string]bool{}
		queue := append([]string(nil), needs[sid]...)
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			if seen[n] || st.Stages[n] == nil {
				continue
			}
			seen[n] = true
			if isTraining(n) {
				out[sid] = n
				break
			}
			if strings.HasPrefix(st.Stages[n].Uses, "ckpt/") {
				queue = append(queue, needs[n]...)
			}
		}
	}
	return out
}

var errLongLine = errors.New("line too long")

// readLine returns the next line without its newline; a line longer than
// maxEventLineSize is consumed and reported as errLongLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) <= maxEventLineSize {
			buf = append(buf, chunk...)
		} else {
			buf = buf[:0]
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, errLongLine
		}
		switch {
		case err == nil:
			return bytes.TrimRight(buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return buf, nil
		default:
			return nil, err
		}
	}
}
