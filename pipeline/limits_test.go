package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
	"github.com/rs/zerolog"
)

// A stage whose plugin returns a 100 MiB output fails with the reason, and
// run.json stays small enough to read back (it grew to 211 MB, which
// resume, logs and report then refused).
func TestHugeOutputFailsTheStageNotTheRun(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if c.stage == "big" {
			return map[string]any{"n": 1, "blob": strings.Repeat("x", 100<<20)}, nil
		}
		return map[string]any{"n": 1}, nil
	}}
	st, err := w.run(w.engine(l), "version: 1\nname: p\nstages:\n  big: {uses: work}\n  after: {uses: work, needs: [big]}\n")
	if err == nil {
		t.Fatal("the run succeeded")
	}
	big := st.Stages["big"]
	if big.Status != StatusFailed || !strings.Contains(big.Reason, `output "blob" (a string) is more than 1.0 MiB of JSON`) {
		t.Errorf("stage big: %s, %q", big.Status, big.Reason)
	}
	dir := filepath.Join(w.store.Dir, st.ID)
	fi, err := os.Stat(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 64<<10 {
		t.Errorf("run.json is %d bytes", fi.Size())
	}
	if _, err := LoadState(dir); err != nil {
		t.Errorf("LoadState: %v", err)
	}
}

// A plugin's log record says its level once: events.jsonl lines carried
// "level" twice (the events log's own "info" and the record's).
func TestLogEventsCarryOneLevel(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(_ context.Context, c call, emit func(plugins.Event)) (map[string]any, error) {
		emit(plugins.Event{Log: &plugins.LogEvent{Level: plugins.LevelWarn, Message: "hot", Fields: map[string]any{"level": "x", "stage": "y", "n": 1}}})
		return map[string]any{"n": 1}, nil
	}}
	st := w.mustRun(w.engine(l), "version: 1\nname: p\nstages:\n  a: {uses: work}\n")
	f, err := os.Open(filepath.Join(w.store.Dir, st.ID, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if n := strings.Count(line, `"level":`); n != 1 {
			t.Errorf("%d level keys: %s", n, line)
		}
		if strings.Contains(line, `"event":"log"`) {
			found = true
			if !strings.Contains(line, `"level":"warn"`) || strings.Count(line, `"stage":`) != 1 ||
				!strings.Contains(line, `"field.level":"x"`) || !strings.Contains(line, `"field.stage":"y"`) || !strings.Contains(line, `"n":1`) {
				t.Errorf("log line %s", line)
			}
		}
	}
	if !found {
		t.Error("no log event")
	}
}

// Resume says when the spec changed: the run's own copy edited since the
// run started (resume runs it), or the original spec file edited (resume
// does not run it). Before, it resumed without a word either way.
func TestResumeSaysTheSpecChanged(t *testing.T) {
	w := newWorkspace(t)
	fail := true
	l := &scriptLauncher{run: func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if c.stage == "b" && fail {
			return nil, errors.New("b fails once")
		}
		return map[string]any{"n": 1}, nil
	}}
	const src = "version: 1\nname: p\nstages:\n  a: {uses: work}\n  b: {uses: work, needs: [a]}\n"
	first, err := w.run(w.engine(l), src)
	if err == nil {
		t.Fatal("the first run succeeded")
	}
	fail = false
	resume := func() string {
		var log bytes.Buffer
		e := w.engine(l)
		e.Log = zerolog.New(&log)
		if _, final, err := e.Resume(context.Background(), first.ID); final == nil {
			t.Fatalf("resume: %v", err)
		}
		return log.String()
	}
	// Unchanged: nothing said. (A resumed run that succeeded cannot be
	// resumed again, so b fails once more for the next two resumes.)
	fail = true
	if log := resume(); strings.Contains(log, "spec_changed") {
		t.Errorf("unchanged spec reported as changed:\n%s", log)
	}
	w.write("pipeline.yaml", src+"  c: {uses: work, needs: [a]}\n")
	log := resume()
	if !strings.Contains(log, "pipeline.yaml changed since the run started; resume runs the run's own copy") {
		t.Errorf("edited original not reported:\n%s", log)
	}
	copyPath := filepath.Join(w.store.Dir, first.ID, "pipeline.yaml")
	if err := os.WriteFile(copyPath, []byte(src+"# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fail = false
	if log := resume(); !strings.Contains(log, "was edited since the run started: resume runs the edited spec") {
		t.Errorf("edited copy not reported:\n%s", log)
	}
}
