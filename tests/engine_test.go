package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fanSpec fans out from gen to left and right, and fans in to join, which
// runs only if left's output is above 4. Outputs flow through ${{ }}.
const fanSpec = `version: 1
name: fan
params:
  n: {type: int, default: 3}
  k: {type: int, default: 7}
stages:
  gen:
    uses: exec
    with: {command: "echo count=${{ params.n }} >> $MSPIPE_OUTPUT"}
    outputs: {count: int}
  left:
    uses: exec
    needs: gen
    with: {command: "echo left=$(( ${{ stages.gen.outputs.count }} * 2 )) >> $MSPIPE_OUTPUT"}
    outputs: {left: int}
  right:
    uses: exec
    with: {command: ["sh", "-c", "echo right=${{ params.k }} >> $MSPIPE_OUTPUT"]}
    outputs: {right: int}
  join:
    uses: exec
    needs: [left, right]
    if: "${{ stages.left.outputs.left > 4 }}"
    with: {command: "echo sum=$(( ${{ stages.left.outputs.left }} + ${{ stages.right.outputs.right }} )) >> $MSPIPE_OUTPUT"}
    outputs: {sum: int}
`

func TestFanOutFanInOutputsAndIf(t *testing.T) {
	w := newWorkspace(t)
	w.write("fan.yaml", fanSpec)
	r := w.run("run", "fan.yaml", "--jobs", "2")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	st := w.state(r.stdout)
	if st.Status != "succeeded" {
		t.Fatalf("run status %s", st.Status)
	}
	if got := st.Stages["join"].Outputs["sum"]; got != float64(13) {
		t.Errorf("join sum = %v, want 13 (3*2 + 7)", got)
	}
	// With n=2, left is 4 and join's if is false: join is skipped.
	r = w.run("run", "fan.yaml", "-p", "n=2")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	st = w.state(r.stdout)
	if st.Stages["join"].Status != "skipped" || !strings.Contains(st.Stages["join"].Reason, "was false") {
		t.Errorf("join = %+v, want skipped because the if was false", st.Stages["join"])
	}
	if st.Stages["left"].Outputs["left"] != float64(4) {
		t.Errorf("left = %v, want 4", st.Stages["left"].Outputs["left"])
	}
}

func TestSecondRunIsCachedAndParamChangeRerunsDependents(t *testing.T) {
	w := newWorkspace(t)
	w.write("fan.yaml", fanSpec)
	first := w.run("run", "fan.yaml")
	if first.code != 0 {
		t.Fatalf("exit %d\n%s", first.code, first.stderr)
	}
	second := w.run("run", "fan.yaml")
	if second.code != 0 {
		t.Fatalf("exit %d\n%s", second.code, second.stderr)
	}
	for sid, s := range w.state(second.stdout).Stages {
		if s.Status != "cached" || s.CachedFrom != strings.TrimSpace(first.stdout) {
			t.Errorf("second run: %s is %s (from %q), want cached from the first run", sid, s.Status, s.CachedFrom)
		}
	}
	// k feeds right only, and right feeds join: exactly those two run again.
	third := w.run("run", "fan.yaml", "-p", "k=8")
	if third.code != 0 {
		t.Fatalf("exit %d\n%s", third.code, third.stderr)
	}
	want := map[string]string{"gen": "cached", "left": "cached", "right": "succeeded", "join": "succeeded"}
	if got := w.statuses(third.stdout); !equalMaps(got, want) {
		t.Errorf("after -p k=8: %v, want %v", got, want)
	}
	// --no-cache runs everything.
	fourth := w.run("run", "fan.yaml", "--no-cache")
	for sid, s := range w.statuses(fourth.stdout) {
		if s != "succeeded" {
			t.Errorf("--no-cache: %s is %s", sid, s)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// installTestPlugin copies the test plugin into the workspace's ./plugins.
func installTestPlugin(t *testing.T, w *workspace) {
	t.Helper()
	data, err := os.ReadFile(testPlugin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(w.dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "plugins", "mspipe-stage-test-plugin"), data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestPanickingPluginFailsItsStage(t *testing.T) {
	w := newWorkspace(t)
	installTestPlugin(t, w)
	w.write("p.yaml", `version: 1
name: panics
stages:
  ok: {uses: test/plugin, with: {mode: ok}}
  boom: {uses: test/plugin, needs: ok, with: {mode: panic}}
  after: {uses: exec, needs: boom, with: {command: "true"}}
`)
	r := w.run("run", "p.yaml")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	st := w.state(r.stdout)
	boom := st.Stages["boom"]
	if boom.Status != "failed" || !strings.Contains(boom.Reason, "boom in run") {
		t.Errorf("boom = %+v, want failed with the panic message", boom)
	}
	if !strings.Contains(r.stderr, "[boom] failed") || !strings.Contains(r.stderr, "boom in run") || !strings.Contains(r.stderr, "stage.log") {
		t.Errorf("stderr does not give a one-line reason with the log path:\n%s", r.stderr)
	}
	if st.Stages["ok"].Status != "succeeded" || st.Stages["after"].Status != "pending" {
		t.Errorf("ok = %s, after = %s; want succeeded, pending", st.Stages["ok"].Status, st.Stages["after"].Status)
	}
	if pids := w.waitNoProcesses(5 * time.Second); len(pids) > 0 {
		t.Errorf("processes left behind: %v", pids)
	}
}

func TestHangingPluginHitsItsTimeout(t *testing.T) {
	w := newWorkspace(t)
	installTestPlugin(t, w)
	w.write("h.yaml", `version: 1
name: hangs
stages:
  stuck: {uses: test/plugin, timeout: 2s, with: {mode: hang}}
`)
	start := time.Now()
	r := w.run("run", "h.yaml")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("took %s to fail a 2s timeout", d)
	}
	stuck := w.state(r.stdout).Stages["stuck"]
	if stuck.Status != "failed" || !strings.Contains(stuck.Reason, "timed out after 2s") {
		t.Errorf("stuck = %+v, want failed: timed out after 2s", stuck)
	}
	if pids := w.waitNoProcesses(5 * time.Second); len(pids) > 0 {
		t.Errorf("processes left behind: %v", pids)
	}
}

// TestInterruptLeavesNoProcessAndResumeFinishes sends SIGINT while a stage
// runs a long command: mspipe exits 130, saves the run as cancelled, no
// process it started survives, and resume finishes the run.
func TestInterruptLeavesNoProcessAndResumeFinishes(t *testing.T) {
	w := newWorkspace(t)
	w.write("long.yaml", `version: 1
name: long
stages:
  first: {uses: exec, with: {command: "echo first=1 >> $MSPIPE_OUTPUT"}, outputs: {first: int}}
  slow:
    uses: exec
    needs: first
    with: {command: "touch ../../../../slow-started; if [ -f ../../../../done ]; then echo ok; else sleep 60; fi"}
  last: {uses: exec, needs: slow, with: {command: "echo last"}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := w.command(ctx, "run", "long.yaml")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(w.dir, "slow-started")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow stage never started")
		}
	}
	if len(w.taggedProcesses()) < 3 {
		t.Fatalf("expected mspipe, the exec plugin and the sleep to be running, found %v", w.taggedProcesses())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d (%v), want 130", code, err)
	}
	if pids := w.waitNoProcesses(3 * time.Second); len(pids) > 0 {
		t.Fatalf("processes left behind after SIGINT: %v", pids)
	}
	id := strings.TrimSpace(out.String())
	st := w.state(id)
	if st.Status != "cancelled" || st.Stages["slow"].Status != "cancelled" || st.Stages["first"].Status != "succeeded" || st.Stages["last"].Status != "pending" {
		t.Fatalf("state after SIGINT: run %s, stages %v", st.Status, w.statuses(id))
	}
	firstStarted := st.Stages["first"].Started

	w.write("done", "")
	r := w.run("resume", id)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	st = w.state(id)
	want := map[string]string{"first": "succeeded", "slow": "succeeded", "last": "succeeded"}
	if got := w.statuses(id); st.Status != "succeeded" || !equalMaps(got, want) {
		t.Errorf("after resume: run %s, stages %v", st.Status, got)
	}
	if !st.Stages["first"].Started.Equal(*firstStarted) || st.Stages["first"].Attempts != 1 {
		t.Errorf("resume ran the succeeded stage again: %+v", st.Stages["first"])
	}
}

// TestInterruptRunsAlwaysStagesUntilSecondInterrupt: after the first
// SIGINT a stage with if: always() still runs (as in GitHub Actions after
// a cancel); a second SIGINT stops it, mspipe exits 130 and no process it
// started survives.
func TestInterruptRunsAlwaysStagesUntilSecondInterrupt(t *testing.T) {
	w := newWorkspace(t)
	w.write("cleanup.yaml", `version: 1
name: cleanup
stages:
  slow: {uses: exec, with: {command: "touch ../../../../slow-started; sleep 60"}}
  notify:
    uses: exec
    needs: slow
    if: always()
    with: {command: "echo ${{ stages.slow.status }} > ../../../../notified; sleep 60"}
  after: {uses: exec, needs: slow, with: {command: "echo after"}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := w.command(ctx, "run", "cleanup.yaml")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile := func(name string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(w.dir, name)); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared", name)
			}
		}
	}
	waitFile("slow-started")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFile("notified")
	if b, err := os.ReadFile(filepath.Join(w.dir, "notified")); err != nil || strings.TrimSpace(string(b)) != "cancelled" {
		t.Errorf("notify read stages.slow.status %q (%v), want cancelled", b, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d (%v), want 130", code, err)
	}
	if pids := w.waitNoProcesses(3 * time.Second); len(pids) > 0 {
		t.Fatalf("processes left behind after the second SIGINT: %v", pids)
	}
	id := strings.TrimSpace(out.String())
	want := map[string]string{"slow": "cancelled", "notify": "cancelled", "after": "pending"}
	if got := w.statuses(id); !equalMaps(got, want) {
		t.Errorf("stages %v, want %v", got, want)
	}
}

func TestResumeAfterFailureRerunsOnlyFailedAndDependents(t *testing.T) {
	w := newWorkspace(t)
	w.write("f.yaml", `version: 1
name: flaky
stages:
  a: {uses: exec, with: {command: "echo a"}}
  side: {uses: exec, with: {command: "echo side"}}
  b: {uses: exec, needs: a, with: {command: "test -f ../../../../fixed || { echo not fixed >&2; exit 3; }"}}
  c: {uses: exec, needs: b, with: {command: "echo c"}}
`)
	r := w.run("run", "f.yaml")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	before := w.state(id)
	if b := before.Stages["b"]; b.Status != "failed" || !strings.Contains(b.Reason, "exit") {
		t.Fatalf("b = %+v, want failed with its exit status", b)
	}
	w.write("fixed", "")
	r = w.run("resume", id)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	after := w.state(id)
	for _, sid := range []string{"a", "side"} {
		if !after.Stages[sid].Started.Equal(*before.Stages[sid].Started) {
			t.Errorf("resume re-ran %s, which had succeeded", sid)
		}
	}
	if after.Stages["b"].Attempts != 2 || after.Stages["c"].Status != "succeeded" {
		t.Errorf("b attempts %d (want 2 in all), c %s", after.Stages["b"].Attempts, after.Stages["c"].Status)
	}
	// Resuming a run that succeeded has nothing to do.
	if r := w.run("resume", id); r.code != 0 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Errorf("second resume: exit %d, %s", r.code, r.stderr)
	}
}

func TestCorruptRunStateIsReportedNotTrusted(t *testing.T) {
	w := newWorkspace(t)
	w.write("f.yaml", `version: 1
name: one
stages:
  a: {uses: exec, with: {command: "exit 1"}}
`)
	r := w.run("run", "f.yaml")
	id := strings.TrimSpace(r.stdout)
	path := filepath.Join(w.dir, "runs", id, "run.json")
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), `"failed"`, `"finished"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r = w.run("resume", id)
	if r.code == 0 || !strings.Contains(r.stderr, "corrupt run state") || !strings.Contains(r.stderr, `unknown`) {
		t.Errorf("resume of a hand-edited run.json: exit %d, stderr %s", r.code, r.stderr)
	}
}

func TestInvalidSpecRunsNothing(t *testing.T) {
	w := newWorkspace(t)
	w.write("bad.yaml", "version: 1\nname: bad\nstages:\n  a: {uses: exec, with: {command: \"${{ params.nope }}\"}}\n")
	r := w.run("run", "bad.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, `bad.yaml:4:47: error: stages.a.with.command: unknown param "nope"`) {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "runs")); err == nil {
		t.Error("an invalid spec created a run directory")
	}
}

// TestLateWithValueCheckedByHost: a `with` value that comes from another
// stage's output is known only by its type when the spec is validated; mspipe
// checks the value against the stage's schema when the stage is about to
// run, and fails it without starting its plugin.
func TestLateWithValueCheckedByHost(t *testing.T) {
	w := newWorkspace(t)
	w.write("late.yaml", `version: 1
name: late
stages:
  gen:
    uses: exec
    with: {command: "echo t= >> $MSPIPE_OUTPUT"}
    outputs: {t: string}
  use:
    uses: exec
    needs: gen
    with: {command: "${{ stages.gen.outputs.t }}"}
`)
	if r := w.run("validate", "late.yaml"); r.code != 0 {
		t.Fatalf("validate: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r := w.run("run", "late.yaml")
	want := "late.yaml:11:21: stages.use.with.command: minLength: got 0, want 1"
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, want 1 and %q in stderr:\n%s", r.code, want, r.stderr)
	}
	if strings.Contains(r.stderr, "stage.log") {
		t.Errorf("the console points at a log the refused stage never wrote:\n%s", r.stderr)
	}
	st := w.state(r.stdout)
	if st.Stages["gen"].Status != "succeeded" || st.Stages["use"].Status != "failed" {
		t.Errorf("stage states: gen %s, use %s", st.Stages["gen"].Status, st.Stages["use"].Status)
	}
	if use := st.Stages["use"]; !strings.HasSuffix(use.Reason, want) || use.Attempts != 0 {
		t.Errorf("use: reason %q, %d attempts; want the schema problem and no attempt", use.Reason, use.Attempts)
	}
}
