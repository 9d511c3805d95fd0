package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
)

// filesRun makes a "files" stage write content[stage] into dir/out.txt
// under its work dir and return the directory as output dir.
func filesRun(content map[string]string) func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
	return func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		dir := filepath.Join(c.req.WorkDir, "dir")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "out.txt"), []byte(content[c.stage]), 0o644); err != nil {
			return nil, err
		}
		return map[string]any{"dir": dir, "n": 1}, nil
	}
}

// TestCacheKeyInputs runs a pipeline twice, changing one input of the
// cache key between the runs (or nothing): a changed input runs the stage
// again, an unchanged one serves it from the first run.
func TestCacheKeyInputs(t *testing.T) {
	type change struct {
		name   string
		before string // the spec of the first run
		after  string // the spec of the second run
		// prepare runs before each run (second=false, then true), to
		// change files or the plugin between runs.
		prepare func(w *workspace, l *scriptLauncher, second bool)
		// stage is the stage whose status is checked; want its status in
		// the second run.
		stage string
		want  Status
	}
	const base = "version: 1\nname: c\nstages:\n  a: {uses: work, with: {x: 1}}\n"
	identity := func(v string) func(*workspace, *scriptLauncher, bool) {
		return func(_ *workspace, l *scriptLauncher, second bool) {
			digest := "sha256:aaaa"
			if second {
				digest = v
			}
			l.ident = func(s *spec.Stage) string { return s.Uses + "@1 " + digest }
		}
	}
	file := func(name, first, second string) func(*workspace, *scriptLauncher, bool) {
		return func(w *workspace, _ *scriptLauncher, again bool) {
			if again {
				w.write(name, second)
			} else {
				w.write(name, first)
			}
		}
	}
	tests := []change{
		{name: "nothing", before: base, after: base, stage: "a", want: StatusCached},
		{name: "plugin digest", before: base, after: base, prepare: identity("sha256:bbbb"), stage: "a", want: StatusSucceeded},
		{name: "plugin digest same", before: base, after: base, prepare: identity("sha256:aaaa"), stage: "a", want: StatusCached},
		{name: "with", before: base, after: strings.Replace(base, "x: 1", "x: 2", 1), stage: "a", want: StatusSucceeded},
		{name: "devices", before: "version: 1\nname: c\ncluster: {devices: 2}\nstages:\n  a: {uses: work}\n",
			after: "version: 1\nname: c\ncluster: {devices: 4}\nstages:\n  a: {uses: work}\n", stage: "a", want: StatusSucceeded},
		{name: "rank table content", before: "version: 1\nname: c\ncluster: {rank_table: rt.json}\nstages:\n  a: {uses: work}\n",
			after:   "version: 1\nname: c\ncluster: {rank_table: rt.json}\nstages:\n  a: {uses: work}\n",
			prepare: file("rt.json", `{"server_count":"1"}`, `{"server_count":"2"}`), stage: "a", want: StatusSucceeded},
		{name: "rank table same content", before: "version: 1\nname: c\ncluster: {rank_table: rt.json}\nstages:\n  a: {uses: work}\n",
			after:   "version: 1\nname: c\ncluster: {rank_table: rt.json}\nstages:\n  a: {uses: work}\n",
			prepare: file("rt.json", `{"server_count":"1"}`, `{"server_count":"1"}`), stage: "a", want: StatusCached},
		{name: "pipeline env", before: "version: 1\nname: c\nenv: {MODE: fast}\nstages:\n  a: {uses: work}\n",
			after: "version: 1\nname: c\nenv: {MODE: slow}\nstages:\n  a: {uses: work}\n", stage: "a", want: StatusSucceeded},
		{name: "stage env", before: "version: 1\nname: c\nstages:\n  a: {uses: work, env: {MODE: fast}}\n",
			after: "version: 1\nname: c\nstages:\n  a: {uses: work, env: {MODE: slow}}\n", stage: "a", want: StatusSucceeded},
		{name: "stage env overrides pipeline env to the same value", before: "version: 1\nname: c\nenv: {MODE: fast}\nstages:\n  a: {uses: work}\n",
			after: "version: 1\nname: c\nenv: {MODE: slow}\nstages:\n  a: {uses: work, env: {MODE: fast}}\n", stage: "a", want: StatusCached},
		{name: "path param content", before: "version: 1\nname: c\nparams:\n  data: {type: path, default: data.txt}\nstages:\n  a: {uses: work}\n",
			after:   "version: 1\nname: c\nparams:\n  data: {type: path, default: data.txt}\nstages:\n  a: {uses: work}\n",
			prepare: file("data.txt", "one", "two"), stage: "a", want: StatusSucceeded},
		{name: "path param same content", before: "version: 1\nname: c\nparams:\n  data: {type: path, default: data.txt}\nstages:\n  a: {uses: work}\n",
			after:   "version: 1\nname: c\nparams:\n  data: {type: path, default: data.txt}\nstages:\n  a: {uses: work}\n",
			prepare: file("data.txt", "one", "one"), stage: "a", want: StatusCached},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkspace(t)
			l := &scriptLauncher{}
			if tc.prepare != nil {
				tc.prepare(w, l, false)
			}
			first := w.mustRun(w.engine(l), tc.before)
			if got := first.Stages[tc.stage].Status; got != StatusSucceeded {
				t.Fatalf("first run: %s %s", tc.stage, got)
			}
			if tc.prepare != nil {
				tc.prepare(w, l, true)
			}
			second := w.mustRun(w.engine(l), tc.after)
			ss := second.Stages[tc.stage]
			if ss.Status != tc.want {
				t.Errorf("second run: %s %s, want %s", tc.stage, ss.Status, tc.want)
			}
			sameKey := ss.CacheKey == first.Stages[tc.stage].CacheKey
			if sameKey != (tc.want == StatusCached) {
				t.Errorf("keys %s and %s: same=%v, want %v", first.Stages[tc.stage].CacheKey, ss.CacheKey, sameKey, tc.want == StatusCached)
			}
			if tc.want == StatusCached && ss.CachedFrom != first.ID {
				t.Errorf("cached from %q, want %q", ss.CachedFrom, first.ID)
			}
		})
	}
}

// TestCacheKeyUpstreamContent: a stage's key holds the content of the path
// outputs of the stages it needs, directly or not. The upstream stage's own
// inputs change in both cases; only when its output's content changes do
// the stages after it run again.
func TestCacheKeyUpstreamContent(t *testing.T) {
	spec := func(x int) string {
		return "version: 1\nname: up\nstages:\n" +
			"  a: {uses: files, with: {x: " + string(rune('0'+x)) + "}}\n" +
			"  b: {uses: work, needs: a}\n" +
			"  c: {uses: work, needs: b}\n"
	}
	for _, tc := range []struct {
		name     string
		content2 string
		want     Status
	}{
		{"content changed", "two", StatusSucceeded},
		{"content unchanged", "one", StatusCached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkspace(t)
			content := map[string]string{"a": "one"}
			l := &scriptLauncher{run: filesRun(content)}
			first := w.mustRun(w.engine(l), spec(1))
			if first.Stages["a"].Artifacts["dir"] == "" {
				t.Fatalf("a has no artifact hash: %+v", first.Stages["a"])
			}
			content["a"] = tc.content2
			second := w.mustRun(w.engine(l), spec(2))
			if got := second.Stages["a"].Status; got != StatusSucceeded {
				t.Fatalf("a: %s, want succeeded (its with changed)", got)
			}
			for _, id := range []string{"b", "c"} {
				if got := second.Stages[id].Status; got != tc.want {
					t.Errorf("%s: %s, want %s", id, got, tc.want)
				}
			}
		})
	}
}

// TestCacheRefusesTamperedOutputs: a cached stage whose output file was
// changed after its run is run again, and the run after that is served
// from the new outputs.
func TestCacheRefusesTamperedOutputs(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: filesRun(map[string]string{"a": "good"})}
	const src = "version: 1\nname: t\nstages:\n  a: {uses: files}\n"
	first := w.mustRun(w.engine(l), src)
	out := filepath.Join(first.Stages["a"].Outputs["dir"].(string), "out.txt")
	if err := os.WriteFile(out, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := w.mustRun(w.engine(l), src)
	if got := second.Stages["a"].Status; got != StatusSucceeded {
		t.Errorf("after tampering: a %s, want succeeded (run again)", got)
	}
	if n := len(l.ran()); n != 2 {
		t.Errorf("a ran %d times, want 2", n)
	}
	third := w.mustRun(w.engine(l), src)
	if ss := third.Stages["a"]; ss.Status != StatusCached || ss.CachedFrom != second.ID {
		t.Errorf("third run: a %s from %q, want cached from %s", ss.Status, ss.CachedFrom, second.ID)
	}
}

// TestCachedFromFollowsTheOrigin: a stage cached from a run that itself had
// it cached names the run that produced the outputs.
func TestCachedFromFollowsTheOrigin(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{}
	const src = "version: 1\nname: t\nstages:\n  a: {uses: work}\n"
	first := w.mustRun(w.engine(l), src)
	w.mustRun(w.engine(l), src)
	third := w.mustRun(w.engine(l), src)
	if got := third.Stages["a"].CachedFrom; got != first.ID {
		t.Errorf("cached from %q, want the first run %q", got, first.ID)
	}
	if n := len(l.ran()); n != 1 {
		t.Errorf("a ran %d times, want 1", n)
	}
}

// TestNoCacheRunsEveryStage: with NoCache an unchanged stage runs again.
func TestNoCacheRunsEveryStage(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{}
	const src = "version: 1\nname: t\nstages:\n  a: {uses: work}\n"
	w.mustRun(w.engine(l), src)
	e := w.engine(l)
	e.NoCache = true
	if st := w.mustRun(e, src); st.Stages["a"].Status != StatusSucceeded {
		t.Errorf("a %s, want succeeded", st.Stages["a"].Status)
	}
}

// TestHashPath: a directory's hash covers names and contents, not mtimes;
// a missing path is an error.
func TestHashPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	h1, err := hashPath(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	h2, err := hashPath(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if h1 == h2 {
		t.Error("renaming a file kept the directory hash")
	}
	if _, err := hashPath(context.Background(), filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing path: %v, want not exist", err)
	}
}
