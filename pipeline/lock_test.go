//go:build unix

package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// holdLockEnv makes the test binary a process that takes a run's lock,
// says "locked" and waits to be killed: an owner that can die by kill -9.
const holdLockEnv = "PIPELINE_TEST_HOLD_LOCK"

func TestHelperHoldLock(t *testing.T) {
	dir := os.Getenv(holdLockEnv)
	if dir == "" {
		t.Skip("helper process of TestLockDiesWithItsOwner")
	}
	if _, err := lockRun(dir); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Hour)
}

// failingRun makes a run whose only stage failed, for resume to continue.
func failingRun(t *testing.T, w *workspace) *RunState {
	t.Helper()
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		return nil, errors.New("boom")
	}}
	st, err := w.run(w.engine(l), "version: 1\nname: p\nstages:\n  a: {uses: work}\n")
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("first run: %v", err)
	}
	return st
}

// A run's lock is held while it runs: a resume beside it is refused with
// the owner's pid, and readers see the run as running, not interrupted.
func TestResumeRefusesALiveRun(t *testing.T) {
	w := newWorkspace(t)
	first := failingRun(t, w)
	inStage, release := make(chan struct{}), make(chan struct{})
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		close(inStage)
		<-release
		return nil, errors.New("boom again")
	}}
	done := make(chan error, 1)
	go func() {
		_, _, err := w.engine(l).Resume(context.Background(), first.ID)
		done <- err
	}()
	<-inStage
	other := &scriptLauncher{}
	_, _, err := w.engine(other).Resume(context.Background(), first.ID)
	wantPid := fmt.Sprintf("pid %d", os.Getpid())
	if !errors.Is(err, ErrRunLocked) || !strings.Contains(err.Error(), wantPid) {
		t.Errorf("second resume: %v; want %v naming %s", err, ErrRunLocked, wantPid)
	}
	if ran := other.ran(); len(ran) != 0 {
		t.Errorf("the refused resume ran %v", ran)
	}
	if _, st, err := w.store.Open(first.ID); err != nil || st.Status != StatusRunning || st.Stages["a"].Status != StatusRunning {
		t.Errorf("Open during the run: %v, %+v; want running", err, st)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrStageFailed) {
		t.Fatalf("first resume: %v", err)
	}
	// Its owner has finished: the run can be resumed again.
	if _, _, err := w.engine(&scriptLauncher{}).Resume(context.Background(), first.ID); err != nil {
		t.Errorf("resume after the owner ended: %v", err)
	}
}

// The lock dies with its owner: a run left "running" by a process killed
// with SIGKILL reads as interrupted, and resume takes it over.
func TestLockDiesWithItsOwner(t *testing.T) {
	w := newWorkspace(t)
	st := failingRun(t, w)
	dir := filepath.Join(w.store.Dir, st.ID)
	// What a killed mspipe leaves: run.json saying running.
	st.Status, st.Error, st.Finished = StatusRunning, "", nil
	st.Stages["a"].Status, st.Stages["a"].Reason = StatusRunning, ""
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}

	owner := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	owner.Env = append(os.Environ(), holdLockEnv+"="+dir)
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("owner said %q", line)
	}

	runs, _ := w.store.List()
	if len(runs) != 1 || runs[0].Status != StatusRunning {
		t.Fatalf("with a live owner, List = %+v; want running", runs)
	}
	_, _, err = w.engine(&scriptLauncher{}).Resume(context.Background(), st.ID)
	if want := fmt.Sprintf("pid %d", owner.Process.Pid); !errors.Is(err, ErrRunLocked) || !strings.Contains(err.Error(), want) {
		t.Fatalf("resume beside a live owner: %v; want %v naming %s", err, ErrRunLocked, want)
	}

	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	_, got, err := w.store.Open(st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusInterrupted || got.Stages["a"].Status != StatusInterrupted ||
		!strings.Contains(got.Error, fmt.Sprintf("pid %d", owner.Process.Pid)) {
		t.Errorf("after kill -9 of the owner: status %s, stage %s, error %q; want interrupted naming its pid",
			got.Status, got.Stages["a"].Status, got.Error)
	}
	// Readers never write: run.json still says running.
	if onDisk, err := LoadState(dir); err != nil || onDisk.Status != StatusRunning {
		t.Errorf("run.json after reading: %v, %v", onDisk.Status, err)
	}
	l := &scriptLauncher{}
	_, final, err := w.engine(l).Resume(context.Background(), st.ID)
	if err != nil || final.Status != StatusSucceeded || len(l.ran()) != 1 {
		t.Errorf("resume of the interrupted run: %v, %v, ran %v", err, final, l.ran())
	}
}
