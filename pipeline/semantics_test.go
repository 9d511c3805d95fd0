package pipeline

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// TestEnvReadsTheSpecsEnv: env.NAME is the stage's env over the
// pipeline's over the process's.
func TestEnvReadsTheSpecsEnv(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{}
	e := w.engine(l)
	e.Env = map[string]string{"A": "proc", "B": "proc", "C": "proc"}
	w.mustRun(e, `version: 1
name: env
env: {A: top, B: top}
stages:
  s: {uses: work, env: {A: stage}, with: {v: "${{ env.A }}-${{ env.B }}-${{ env.C }}"}}
  t: {uses: work, with: {v: "${{ env.A }}"}}
`)
	got := map[string]any{}
	for _, c := range l.calls {
		got[c.stage] = c.req.With["v"]
	}
	if got["s"] != "stage-top-proc" || got["t"] != "top" {
		t.Errorf("with.v = %v, want s: stage-top-proc, t: top", got)
	}
}

// TestRelativePathOutputIsTheWorkDirs: a path output a stage reports
// relatively is recorded against the stage's work directory.
func TestRelativePathOutputIsTheWorkDirs(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		w.write(filepath.Join("runs", c.req.RunID, "stages", c.stage, "out.txt"), "made by "+c.stage)
		return map[string]any{"dir": "out.txt"}, nil
	}}
	st := w.mustRun(w.engine(l), `version: 1
name: out
stages:
  f: {uses: files}
`)
	want := filepath.Join(w.dir, "runs", st.ID, "stages", "f", "out.txt")
	if got := st.Stages["f"].Outputs["dir"]; got != want {
		t.Errorf("output dir = %v, want %s", got, want)
	}
	if st.Stages["f"].Artifacts["dir"] == "" {
		t.Errorf("no content hash of the output")
	}
}
