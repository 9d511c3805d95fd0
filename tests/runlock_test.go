package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lingerSpec's stage starts a process in a session of its own (setsid, out
// of every process group mspipe knows) and one in its own group, marks that
// it is up, and waits. Once the mark exists it succeeds at once, for resume.
const lingerSpec = `version: 1
name: linger
stages:
  linger:
    uses: exec
    with:
      command: |
        if [ -e %[1]s ]; then exit 0; fi
        setsid sleep 600 &
        sleep 600 &
        echo up >> %[1]s
        wait
`

// One writer per run, and no orphans: a resume beside a live run is
// refused with the owner's pid; kill -9 of mspipe takes every process of
// the stage down, the setsid'd one included; the run then reads as
// interrupted and resume continues it.
func TestKilledRunLeavesNoProcessAndReadsInterrupted(t *testing.T) {
	w := newWorkspace(t)
	mark := filepath.Join(w.dir, "up")
	w.write("linger.yaml", fmt.Sprintf(lingerSpec, mark))
	owner := w.command(t.Context(), "run", "linger.yaml")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = owner.Wait(); close(exited) }()
	waitFor(t, "the stage to start its processes", func() bool { _, err := os.Stat(mark); return err == nil })
	entries, err := os.ReadDir(filepath.Join(w.dir, "runs"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("runs: %v, %v", entries, err)
	}
	id := entries[0].Name()

	r := w.run("resume", id)
	if wantPid := fmt.Sprintf("pid %d", owner.Process.Pid); r.code == 0 || !strings.Contains(r.stderr, "in use") || !strings.Contains(r.stderr, wantPid) {
		t.Errorf("resume beside the live run: exit %d, stderr %q; want a refusal naming %s", r.code, r.stderr, wantPid)
	}
	if data, _ := os.ReadFile(mark); string(data) != "up\n" {
		t.Errorf("the stage ran again beside itself: mark %q", data)
	}
	if r := w.run("runs"); !strings.Contains(r.stdout, " running ") {
		t.Errorf("runs while it runs:\n%s", r.stdout)
	}

	if err := syscall.Kill(owner.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-exited
	if left := w.waitNoProcesses(20 * time.Second); len(left) > 0 {
		t.Fatalf("processes left 20s after kill -9 of mspipe: %s", describe(left))
	}
	t.Logf("every process of the run was gone %v after kill -9", time.Since(killed).Round(time.Millisecond))

	r = w.run("runs")
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, " interrupted ") || strings.Contains(r.stdout, "running") {
		t.Errorf("runs after kill -9:\n%s", r.stdout)
	}
	r = w.run("runs", "--output", "json")
	var listed []struct {
		ID     string
		Status string
		Stages map[string]struct{ Status string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 1 {
		t.Fatalf("runs --output json: %v\n%s", err, r.stdout)
	}
	if listed[0].Status != "interrupted" || listed[0].Stages["linger"].Status != "interrupted" {
		t.Errorf("runs --output json: %+v", listed[0])
	}
	r = w.run("logs", id)
	if !strings.Contains(r.stdout, "=== linger (exec): interrupted") || !strings.Contains(r.stderr, "interrupted") {
		t.Errorf("logs after kill -9: stdout %q, stderr %q", r.stdout, r.stderr)
	}

	r = w.run("resume", id)
	if r.code != 0 || w.state(id).Status != "succeeded" {
		t.Errorf("resume of the interrupted run: exit %d\n%s", r.code, r.stderr)
	}
}

// waitFor polls cond for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describe names processes by pid and command line.
func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		parts = append(parts, fmt.Sprintf("%d %q", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return strings.Join(parts, ", ")
}
