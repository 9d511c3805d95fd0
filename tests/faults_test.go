//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/plugins/host"
)

// The fault tests break a training run at a moment they observe (a step
// event, a checkpoint being written, a checkpoint on disk), then check that
// nothing was lost: the run fails saying why, no process is left, every
// checkpoint on disk is whole, and `mspipe resume` ends with checkpoints
// byte for byte those of a run that was never broken.

// faultJob is a small training pipeline to break.
type faultJob struct {
	devices int
	images  int    // training images, over all shards
	train   string // the train stage's `with` fields besides data
}

// dataParallelJob trains cnn on 4 devices: 20 steps an epoch, 60 in all,
// a checkpoint every 5 steps on every rank. The tests kill ranks, which
// their peers see at once (a closed connection); the collective timeout
// only has to outlast a rank starved of CPU by a loaded machine (3 s did
// not, beside another full suite at a load average of 28).
var dataParallelJob = faultJob{devices: 4, images: 2560, train: "model: cnn, mode: data_parallel, epochs: 3, batch_size: 32, " +
	"log_steps: 1, save_checkpoint_steps: 5, keep_checkpoint_max: 100, collective_timeout: 30s, eval: false"}

// splitJob trains the seeds' SemiAutoParallelNet on 2 devices with its
// matmul split; rank 0 saves the integrated checkpoint every 5 steps.
var splitJob = faultJob{devices: 2, images: 1280, train: "model: semi_auto_net, mode: semi_auto_parallel, " +
	"strategy: {fc.matmul: [[1, 1], [1, 2]]}, epochs: 3, batch_size: 32, " +
	"log_steps: 1, save_checkpoint_steps: 5, keep_checkpoint_max: 100, collective_timeout: 30s, eval: false"}

func (j faultJob) spec() string {
	return fmt.Sprintf(`version: 1
name: fault
cluster: {devices: %d}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: %d, test_images: 40, shards: %d}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", %s}
`, j.devices, j.images, j.devices, j.train)
}

// uninterruptedRunFiles keeps the checkpoints of each job's uninterrupted run
// for the tests that break the same job.
var uninterruptedRunFiles = map[faultJob]map[string][]byte{}

// uninterruptedCheckpoints runs job to its end in a workspace of its own (once per
// test binary) and returns the checkpoints of its train stage.
func uninterruptedCheckpoints(t *testing.T, job faultJob) map[string][]byte {
	t.Helper()
	if files, ok := uninterruptedRunFiles[job]; ok {
		return files
	}
	w := newWorkspace(t)
	w.write("job.yaml", job.spec())
	r := w.run("run", "job.yaml")
	if r.code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s", r.code, r.stderr)
	}
	files := stageCheckpointFiles(t, filepath.Join(w.dir, "runs", strings.TrimSpace(r.stdout), "stages", "train"))
	uninterruptedRunFiles[job] = files
	return files
}

// backgroundRun is an `mspipe` command running while the test breaks it.
type backgroundRun struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	exited         chan struct{}
}

func (w *workspace) startInBackground(args ...string) *backgroundRun {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	w.t.Cleanup(cancel)
	b := &backgroundRun{cmd: w.command(ctx, args...), exited: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	w.t.Cleanup(func() { _ = b.cmd.Process.Kill(); <-b.exited })
	return b
}

// wait waits for the command and returns its exit code.
func (b *backgroundRun) wait() int {
	<-b.exited
	return b.cmd.ProcessState.ExitCode()
}

// waitRunDir waits for the one run directory of the workspace.
func (w *workspace) waitRunDir() (id, dir string) {
	w.t.Helper()
	waitFor(w.t, "the run directory", func() bool {
		entries, _ := os.ReadDir(filepath.Join(w.dir, "runs"))
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				id = e.Name()
			}
		}
		return id != ""
	})
	return id, filepath.Join(w.dir, "runs", id)
}

// faultStepEvent is a step event of the train stage in events.jsonl.
type faultStepEvent struct {
	Stage      string `json:"stage"`
	Event      string `json:"event"`
	Rank       int    `json:"rank"`
	GlobalStep int    `json:"global_step"`
}

// waitRankStep follows events.jsonl of the run in dir until rank reports a
// finished global step of at least step, and returns that step.
func waitRankStep(t *testing.T, dir string, rank, step int, b *backgroundRun) int {
	t.Helper()
	var offset int64
	deadline := time.Now().Add(time.Minute)
	for ; time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case <-b.exited:
			t.Fatalf("mspipe exited before rank %d reached step %d\n%s", rank, step, b.stderr.String())
		default:
		}
		data, err := os.ReadFile(filepath.Join(dir, "events.jsonl"))
		if err != nil || int64(len(data)) <= offset {
			continue
		}
		// Only whole lines: the engine may be writing the last one.
		end := bytes.LastIndexByte(data, '\n') + 1
		sc := bufio.NewScanner(bytes.NewReader(data[offset:end]))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev faultStepEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Stage == "train" && ev.Event == "step" && ev.Rank == rank && ev.GlobalStep >= step {
				return ev.GlobalStep
			}
		}
		offset = int64(end)
	}
	t.Fatalf("rank %d did not report step %d within a minute", rank, step)
	return 0
}

// stageCheckpointFiles reads every .ckpt of a train stage's directory, by path
// relative to it (device{i}/ckpt_{i}/CKP-{epoch}_{step}.ckpt).
func stageCheckpointFiles(t *testing.T, stageDir string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(stageDir, "device*", "ckpt_*", "*.ckpt"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no checkpoints in %s (%v)", stageDir, err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(stageDir, p)
		out[rel] = data
	}
	return out
}

// requireSameCheckpoints compares the checkpoints of a broken and resumed
// run with an uninterrupted run's: the same files, byte for byte. (A .ckpt
// holds tensors only, no time stamp: equal training gives equal bytes.)
func requireSameCheckpoints(t *testing.T, got, want map[string][]byte) {
	t.Helper()
	names := func(m map[string][]byte) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if g, w := names(got), names(want); !slices.Equal(g, w) {
		t.Fatalf("checkpoint files after resume:\n  %v\nuninterrupted:\n  %v", g, w)
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s differs from the uninterrupted run's (%d and %d bytes)", name, len(got[name]), len(data))
		}
	}
	t.Logf("%d checkpoint files byte-identical to the uninterrupted run's", len(want))
}

// requireSoundCheckpoints checks every checkpoint directory under dir:
// each .ckpt decodes and its sidecar digest (.ckpt.sha256) matches, but for
// at most the newest one, which a kill between the two writes may leave
// without its sidecar (resume skips such a file), and whatever
// else a killed write left there (a temporary file) is not a checkpoint
// ckpt.NewestFirst, and so resume or a later stage, would take. It returns
// the number of checkpoints and of other files.
func requireSoundCheckpoints(t *testing.T, dir string) (checkpoints, others int) {
	t.Helper()
	ckptDirs, _ := filepath.Glob(filepath.Join(dir, "stages", "*", "device*", "ckpt_*"))
	if len(ckptDirs) == 0 {
		t.Fatalf("no checkpoint directory under %s", dir)
	}
	for _, d := range ckptDirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var unproven []string
		for _, e := range entries {
			path := filepath.Join(d, e.Name())
			if strings.HasSuffix(e.Name(), ".ckpt"+ckpt.DigestExt) && !strings.HasPrefix(e.Name(), ".") {
				continue // a sidecar: checked with its checkpoint
			}
			if !strings.HasSuffix(e.Name(), ".ckpt") {
				others++
				t.Logf("not a checkpoint: %s", path)
				continue
			}
			checkpoints++
			_, err := ckpt.ReadVerified(path)
			switch {
			case errors.Is(err, ckpt.ErrUnverified):
				unproven = append(unproven, path)
			case err != nil:
				t.Errorf("torn checkpoint %s: %v", path, err)
			}
		}
		listed, err := ckpt.NewestFirst(d, ckpt.DefaultPrefix)
		if err != nil && !errors.Is(err, ckpt.ErrNoCheckpoint) {
			t.Fatal(err)
		}
		switch {
		case len(unproven) == 1 && unproven[0] == listed[0]:
			t.Logf("%s was saved without its sidecar (killed between the two writes): resume skips it", unproven[0])
		case len(unproven) > 0:
			t.Errorf("checkpoints without a sidecar digest, so a damaged one could pass for whole: %v", unproven)
		}
		for _, p := range listed {
			if !strings.HasSuffix(p, ".ckpt") || strings.HasPrefix(filepath.Base(p), ".") {
				t.Errorf("resume would consider %s", p)
			}
		}
	}
	return checkpoints, others
}

// rankResult is the part of a rank's result.json the tests read.
type rankResult struct {
	GlobalStep  int    `json:"global_step"`
	ResumedFrom string `json:"resumed_from"`
}

func readRankResult(t *testing.T, stageDir string, rank int) rankResult {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stageDir, fmt.Sprintf("device%d", rank), "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r rankResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// resumeAndCompare resumes the run id, which must then succeed with its
// training resumed from a checkpoint (not started afresh), and compares
// its checkpoints with want.
func resumeAndCompare(t *testing.T, w *workspace, id string, devices int, want map[string][]byte) {
	t.Helper()
	began := time.Now()
	r := w.run("resume", id)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	if st := w.state(id); st.Status != "succeeded" || st.Stages["train"].Status != "succeeded" {
		t.Fatalf("after resume: run %s, stages %v", st.Status, w.statuses(id))
	}
	stageDir := filepath.Join(w.dir, "runs", id, "stages", "train")
	for rank := range devices {
		res := readRankResult(t, stageDir, rank)
		if res.ResumedFrom == "" {
			t.Errorf("rank %d started afresh: resume must continue from the last checkpoint", rank)
		}
		if rank == 0 {
			t.Logf("resume (%.1fs): rank 0 continued from %s to global step %d", time.Since(began).Seconds(), res.ResumedFrom, res.GlobalStep)
		}
	}
	if left := w.waitNoProcesses(5 * time.Second); len(left) > 0 {
		t.Errorf("processes left after resume: %s", describe(left))
	}
	requireSameCheckpoints(t, stageCheckpointFiles(t, stageDir), want)
}

// TestKilledRankFailsStageAndResumeIsBitIdentical kills one rank with
// SIGKILL in the middle of training (after it reported step 7, so in step
// 8, with the checkpoints of step 5 on disk): in data_parallel on 4 devices
// and in semi_auto_parallel on 2, where the killed rank 0 is the one that
// writes the integrated checkpoints. Every other rank notices in its
// collective and stops by itself, blaming the killed rank; the run fails
// naming it; resume ends bit-identical to an uninterrupted run.
func TestKilledRankFailsStageAndResumeIsBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		name   string
		job    faultJob
		victim int
	}{
		{"data_parallel", dataParallelJob, 2},
		{"semi_auto_parallel", splitJob, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := uninterruptedCheckpoints(t, tc.job)
			w := newWorkspace(t)
			w.write("job.yaml", tc.job.spec())
			run := w.startInBackground("run", "job.yaml")
			id, dir := w.waitRunDir()
			step := waitRankStep(t, dir, tc.victim, 7, run)
			pid := w.rankPid(tc.victim)
			if pid == 0 {
				t.Fatalf("rank %d's process not found", tc.victim)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if code := run.wait(); code != 1 {
				t.Fatalf("run after the kill: exit %d, want 1\n%s", code, run.stderr.String())
			}
			t.Logf("killed rank %d after its step %d; mspipe exited %.1fs later", tc.victim, step, time.Since(killed).Seconds())
			if left := w.waitNoProcesses(5 * time.Second); len(left) > 0 {
				t.Errorf("processes left: %s", describe(left))
			}

			named := fmt.Sprintf("rank %d (device %d)", tc.victim, tc.victim)
			if !strings.Contains(run.stderr.String(), named) {
				t.Errorf("stderr does not name %s:\n%s", named, run.stderr.String())
			}
			st := w.state(id)
			train := st.Stages["train"]
			if st.Status != "failed" || train.Status != "failed" || !strings.Contains(train.Reason, named) || !strings.Contains(train.Reason, "killed") {
				t.Errorf("run.json: run %s, train %s: %q; want failed, naming %s killed", st.Status, train.Status, train.Reason, named)
			}
			// The others stopped by themselves within the collective
			// timeout: each failed in a collective and blamed the dead
			// rank (the launcher would only stop them later, and then
			// they would blame nobody).
			stageDir := filepath.Join(dir, "stages", "train")
			for r := range tc.job.devices {
				if r == tc.victim {
					continue
				}
				var b struct {
					Rank  int    `json:"rank"`
					Error string `json:"error"`
				}
				data, err := os.ReadFile(filepath.Join(stageDir, fmt.Sprintf("device%d", r), "blame.json"))
				if err == nil {
					err = json.Unmarshal(data, &b)
				}
				if err != nil || b.Rank != tc.victim {
					t.Errorf("rank %d did not fail blaming rank %d: %s (%v)", r, tc.victim, data, err)
				} else if r == 0 || r == 1 {
					t.Logf("rank %d: %s", r, b.Error)
				}
			}
			if left := shmFilesOf(t, stageDir); len(left) > 0 {
				t.Errorf("shared memory files left: %v", left)
			}
			requireSoundCheckpoints(t, dir)
			resumeAndCompare(t, w, id, tc.job.devices, want)
		})
	}
}

// stagePluginPid finds the live plugin process serving the stage type uses
// among the workspace's processes.
func (w *workspace) stagePluginPid(uses string) int {
	for _, pid := range w.taggedProcesses() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("\x00"+host.ServeCommand+"\x00"+uses+"\x00")) {
			return pid
		}
	}
	return 0
}

// TestKilledStagePluginLeavesNoRank kills the npu/train plugin process
// with SIGKILL mid-training (as the OOM killer would): it cannot stop its
// ranks, but they die with it (their parent-death signal); mspipe fails
// the stage saying the plugin died, and resume ends bit-identical to an
// uninterrupted run.
func TestKilledStagePluginLeavesNoRank(t *testing.T) {
	want := uninterruptedCheckpoints(t, dataParallelJob)
	w := newWorkspace(t)
	w.write("job.yaml", dataParallelJob.spec())
	run := w.startInBackground("run", "job.yaml")
	id, dir := w.waitRunDir()
	step := waitRankStep(t, dir, 0, 7, run)
	plugin := w.stagePluginPid("npu/train")
	if plugin == 0 {
		t.Fatal("the npu/train plugin process not found")
	}
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if code := run.wait(); code != 1 {
		t.Fatalf("run after the plugin was killed: exit %d, want 1\n%s", code, run.stderr.String())
	}
	if left := w.waitNoProcesses(10 * time.Second); len(left) > 0 {
		t.Fatalf("processes left 10s after the plugin was killed: %s", describe(left))
	}
	st := w.state(id)
	train := st.Stages["train"]
	t.Logf("killed the plugin after rank 0's step %d; every process was gone %.2fs later; train stage: %s",
		step, time.Since(killed).Seconds(), train.Reason)
	if st.Status != "failed" || train.Status != "failed" || !strings.Contains(train.Reason, "plugin") {
		t.Errorf("run.json: run %s, train %s: %q; want failed, saying the plugin died", st.Status, train.Status, train.Reason)
	}
	if left := shmFilesOf(t, filepath.Join(dir, "stages", "train")); len(left) > 0 {
		t.Errorf("shared memory files left: %v", left)
	}
	requireSoundCheckpoints(t, dir)
	resumeAndCompare(t, w, id, dataParallelJob.devices, want)
}

// dirWatch watches one directory for files created in it or renamed into it.
type dirWatch struct {
	f   *os.File
	buf [64 << 10]byte
}

func watchCreates(t *testing.T, dir string) *dirWatch {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE|syscall.IN_MOVED_TO); err != nil {
		syscall.Close(fd)
		t.Fatalf("watch %s: %v", dir, err)
	}
	n := &dirWatch{f: os.NewFile(uintptr(fd), "inotify")}
	t.Cleanup(func() { n.f.Close() })
	return n
}

// next returns the names of the next batch of files created in or renamed
// into the directory.
func (n *dirWatch) next(t *testing.T) []string {
	t.Helper()
	_ = n.f.SetReadDeadline(time.Now().Add(time.Minute))
	k, err := n.f.Read(n.buf[:])
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	var names []string
	for off := 0; off+syscall.SizeofInotifyEvent <= k; {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&n.buf[off]))
		name := n.buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
		names = append(names, string(bytes.TrimRight(name, "\x00")))
		off += syscall.SizeofInotifyEvent + int(ev.Len)
	}
	return names
}

// TestKilledMspipeWhileSavingLeavesNothingTorn kills mspipe with SIGKILL
// the moment rank 0 begins writing its second checkpoint (its temporary
// file appears). Alone, that lets the plugin stop the ranks, which may
// finish the save first; with the writing rank killed at the same moment
// (as a crashed host would), the write is surely cut short. Either way the
// plugin and every rank die; every .ckpt on disk decodes and its CRC
// matches; an unfinished temporary file is nothing resume would read;
// resume removes it and ends bit-identical to an uninterrupted run.
func TestKilledMspipeWhileSavingLeavesNothingTorn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		killWriter bool
	}{{"mspipe", false}, {"mspipe and the writing rank", true}} {
		t.Run(tc.name, func(t *testing.T) {
			want := uninterruptedCheckpoints(t, dataParallelJob)
			w := newWorkspace(t)
			w.write("job.yaml", dataParallelJob.spec())
			run := w.startInBackground("run", "job.yaml")
			id, dir := w.waitRunDir()
			ckptDir := filepath.Join(dir, "stages", "train", "device0", "ckpt_0")
			waitFor(t, "rank 0's checkpoint directory", func() bool { _, err := os.Stat(ckptDir); return err == nil })
			rank0 := w.rankPid(0)
			if rank0 == 0 {
				t.Fatal("rank 0's process not found")
			}
			watch := watchCreates(t, ckptDir)
			// The first save may have begun before the watch: count whole files.
			saved, writing := 0, ""
			if names, _ := filepath.Glob(filepath.Join(ckptDir, "*.ckpt")); len(names) > 0 {
				saved = len(names)
			}
			for writing == "" {
				for _, name := range watch.next(t) {
					switch {
					case strings.HasSuffix(name, ".ckpt"):
						saved++
					case saved > 0 && writing == "" && strings.Contains(name, ".ckpt.tmp-"):
						writing = name
					}
				}
			}
			if tc.killWriter {
				if err := syscall.Kill(rank0, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			if err := syscall.Kill(run.cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			run.wait()
			left := w.waitNoProcesses(10 * time.Second)
			if len(left) > 0 {
				t.Fatalf("processes left 10s after the kill: %s", describe(left))
			}
			t.Logf("killed as rank 0 began %s, after %d whole checkpoint(s); every process was gone %.2fs later",
				writing, saved, time.Since(killed).Seconds())

			if left := shmFilesOf(t, filepath.Join(dir, "stages", "train")); len(left) > 0 {
				t.Errorf("shared memory files left: %v", left)
			}
			n, unfinished := requireSoundCheckpoints(t, dir)
			_, err := os.Stat(filepath.Join(ckptDir, writing))
			t.Logf("%d checkpoints on disk, all whole with matching CRC; %d unfinished temporary file(s); rank 0's write finished: %v",
				n, unfinished, err != nil)
			if tc.killWriter && err != nil {
				t.Logf("rank 0 renamed %s before it was killed: nothing was cut short this time", writing)
			}
			if r := w.run("runs"); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, " interrupted ") {
				t.Errorf("runs after kill -9 does not show %s interrupted:\n%s", id, r.stdout)
			}
			resumeAndCompare(t, w, id, dataParallelJob.devices, want)
			if _, unfinished := requireSoundCheckpoints(t, dir); unfinished > 0 {
				t.Errorf("%d unfinished temporary file(s) left in checkpoint directories after resume", unfinished)
			}
		})
	}
}

// mountSmallTmpfs mounts a tmpfs of the given size on dir, or skips the test
// (saying why) where mounting is not allowed.
func mountSmallTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// fillFileSystem writes path until the file system is full.
func fillFileSystem(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return
		}
	}
}

// TestFullDiskFailsNamingTheFileAndResumeContinues runs the data-parallel
// job with its run directory on a small tmpfs and fills the tmpfs once
// every rank has saved its step-5 checkpoint. The next save fails: the run
// fails with an error that says no space is left and names the checkpoint
// it could not write, in stderr and run.json; the checkpoints already
// saved are whole; once space is freed, resume finishes the run
// bit-identical to an uninterrupted one.
func TestFullDiskFailsNamingTheFileAndResumeContinues(t *testing.T) {
	w := newWorkspace(t)
	mountSmallTmpfs(t, filepath.Join(w.dir, "runs"), "64m")
	want := uninterruptedCheckpoints(t, dataParallelJob)
	w.write("job.yaml", dataParallelJob.spec())
	run := w.startInBackground("run", "job.yaml")
	id, dir := w.waitRunDir()
	stageDir := filepath.Join(dir, "stages", "train")
	waitFor(t, "every rank's step-5 checkpoint", func() bool {
		for r := range dataParallelJob.devices {
			if _, err := os.Stat(filepath.Join(stageDir, fmt.Sprintf("device%d", r), fmt.Sprintf("ckpt_%d", r), "CKP-1_5.ckpt")); err != nil {
				return false
			}
		}
		return true
	})
	filler := filepath.Join(w.dir, "runs", "filler")
	fillFileSystem(t, filler)
	if code := run.wait(); code != 1 {
		t.Fatalf("run on a full disk: exit %d, want 1\n%s", code, run.stderr.String())
	}
	if left := w.waitNoProcesses(5 * time.Second); len(left) > 0 {
		t.Errorf("processes left: %s", describe(left))
	}
	// The checkpoint a rank could not write, and why.
	noSpace := regexp.MustCompile(`write checkpoint ckpt_\d/CKP-\d+_\d+\.ckpt: .*no space left on device`)
	if !noSpace.MatchString(run.stderr.String()) {
		t.Errorf("stderr does not match %q:\n%s", noSpace, run.stderr.String())
	}
	st := w.state(id)
	train := st.Stages["train"]
	t.Logf("train stage: %s", train.Reason)
	if st.Status != "failed" || train.Status != "failed" || !noSpace.MatchString(train.Reason) {
		t.Errorf("run.json: run %s, train %s: %q; want failed, matching %q", st.Status, train.Status, train.Reason, noSpace)
	}
	var saved struct{ Error string }
	if data, err := os.ReadFile(filepath.Join(dir, "run.json")); err != nil || json.Unmarshal(data, &saved) != nil || !noSpace.MatchString(saved.Error) {
		t.Errorf("run.json's error %q (%v) does not match %q", saved.Error, err, noSpace)
	}
	n, _ := requireSoundCheckpoints(t, dir)
	if n < dataParallelJob.devices {
		t.Errorf("%d checkpoints left, want at least the step-5 one of each of %d ranks", n, dataParallelJob.devices)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	resumeAndCompare(t, w, id, dataParallelJob.devices, want)
}
