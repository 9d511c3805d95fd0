package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as a rank process: with LAUNCH_TEST_MODE
// set it behaves as that mode says instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("LAUNCH_TEST_MODE") {
	case "":
		os.Exit(m.Run())
	case "external":
		os.Exit(externalRank())
	case "ok":
		fmt.Printf("rank %s device %s size %s table %s\n", os.Getenv("RANK_ID"), os.Getenv("DEVICE_ID"), os.Getenv("RANK_SIZE"), os.Getenv("RANK_TABLE_FILE"))
		os.Exit(0)
	case "rank-2-stops":
		// Rank 2 stops itself; the others fail a moment later, as ranks
		// whose collective timed out on it would.
		writePid()
		if os.Getenv("RANK_ID") == "2" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			time.Sleep(time.Minute)
			os.Exit(0)
		}
		time.Sleep(300 * time.Millisecond)
		fmt.Println("rank 2 did not answer")
		os.Exit(1)
	case "fail-rank-1":
		if os.Getenv("RANK_ID") == "1" {
			time.Sleep(200 * time.Millisecond)
			fmt.Println("rank 1 gives up")
			os.Exit(3)
		}
		fallthrough
	case "sleep":
		// Record the pid, then wait to be stopped.
		writePid()
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(2)
}

func job(t *testing.T, mode string, n int) Job {
	t.Helper()
	ranks := make([]Rank, n)
	for i := range ranks {
		ranks[i] = Rank{RankID: i, DeviceID: i}
	}
	return Job{
		Path: os.Args[0], Args: []string{"-test.run=^$"}, Dir: t.TempDir(), RankSize: n, Ranks: ranks,
		RankTable: "/tmp/rank_table_4pcs.json", Env: []string{"LAUNCH_TEST_MODE=" + mode}, Grace: time.Second,
	}
}

func TestSeedsLayoutAndEnvironment(t *testing.T) {
	j := job(t, "ok", 4)
	if err := Run(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 4; r++ {
		log, err := os.ReadFile(LogPath(j.Dir, r))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("rank %d device %d size 4 table /tmp/rank_table_4pcs.json\n", r, r)
		if !strings.HasPrefix(string(log), want) {
			t.Errorf("train.log%d = %q, want %q", r, log, want)
		}
		env, err := os.ReadFile(filepath.Join(j.Dir, fmt.Sprintf("device%d/env%d.log", r, r)))
		if err != nil || !strings.Contains(string(env), fmt.Sprintf("RANK_ID=%d\n", r)) || !strings.Contains(string(env), "RANK_SIZE=4\n") {
			t.Errorf("env%d.log lacks the rank variables: %v", r, err)
		}
		// The environment can hold secrets: only the owner reads it.
		if st, err := os.Stat(filepath.Join(j.Dir, fmt.Sprintf("device%d/env%d.log", r, r))); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != 0o600 {
			t.Errorf("env%d.log mode %v, want 0600", r, st.Mode().Perm())
		}
	}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

func rankPids(t *testing.T, dir string, n int) []int {
	var pids []int
	for r := 0; r < n; r++ {
		b, err := os.ReadFile(filepath.Join(DeviceDir(dir, r), "pid"))
		if err != nil {
			continue
		}
		// Never a pid of 0 or less: kill(0, sig) signals the test's own
		// process group (go test and the shell that started it), and
		// kill(-1, sig) every process of the user.
		if pid, err := strconv.Atoi(string(b)); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// writePid leaves the rank's pid in ./pid for rankPids, renamed into
// place so that a reader never sees the file empty or half written.
func writePid() {
	if err := os.WriteFile("pid.tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err == nil {
		_ = os.Rename("pid.tmp", "pid")
	}
}

// TestOneRankFailingStopsTheOthers: rank 1 exits 3; the others, asleep, are
// stopped and the error names rank 1 and quotes its log.
func TestOneRankFailingStopsTheOthers(t *testing.T) {
	j := job(t, "fail-rank-1", 4)
	start := time.Now()
	err := Run(context.Background(), j)
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(err.Error(), "rank 1 (device 1) exit status 3") || !strings.Contains(err.Error(), "rank 1 gives up") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s", d)
	}
	for _, pid := range rankPids(t, j.Dir, 4) {
		if alive(pid) {
			t.Errorf("rank process %d still alive", pid)
		}
	}
}

// TestPeerFailWaitLetsPeersFailOnTheirOwn: with PeerFailWait the sleeping
// peers are stopped only after the wait, not at once.
func TestPeerFailWaitLetsPeersFailOnTheirOwn(t *testing.T) {
	j := job(t, "fail-rank-1", 3)
	j.PeerFailWait = 1500 * time.Millisecond
	start := time.Now()
	err := Run(context.Background(), j)
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 20*time.Second {
		t.Errorf("returned after %s, want the peer wait (1.5s) and not much more", d)
	}
	for _, pid := range rankPids(t, j.Dir, 3) {
		if alive(pid) {
			t.Errorf("rank process %d still alive", pid)
		}
	}
}

// TestStoppedRankIsTheCause: rank 2 is stopped (SIGSTOP) and the others
// fail. Nothing is left that could notice anything, so Run kills the
// stopped rank at once instead of waiting for PeerFailWait and the grace
// period, and the error names the stopped rank, not the first one that
// exited.
func TestStoppedRankIsTheCause(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to tell a stopped process")
	}
	j := job(t, "rank-2-stops", 4)
	j.PeerFailWait, j.Grace = time.Hour, time.Hour
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), j) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run still waits a minute after the failures: for PeerFailWait or the grace period")
	}
	want := "rank 2 (device 2) was stopped (SIGSTOP or a debugger) while the job failed; first failed rank "
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "rank 2 did not answer") {
		t.Fatalf("err = %v, want it to start with %q and quote a failed rank's log", err, want)
	}
	for _, pid := range rankPids(t, j.Dir, 4) {
		if alive(pid) {
			t.Errorf("rank process %d still alive", pid)
		}
	}
}

func TestCancelStopsEveryRank(t *testing.T) {
	j := job(t, "sleep", 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, j) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(rankPids(t, j.Dir, 3)) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for _, pid := range rankPids(t, j.Dir, 3) {
		if alive(pid) {
			t.Errorf("rank process %d still alive", pid)
		}
	}
}

// TestCancelEndsStoppedRank: a canceled job whose rank is stopped ends
// without the grace period: SIGCONT after SIGTERM lets the rank handle it.
func TestCancelEndsStoppedRank(t *testing.T) {
	j := job(t, "sleep", 3)
	j.Grace = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, j) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(rankPids(t, j.Dir, 3)) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	pids := rankPids(t, j.Dir, 3)
	if len(pids) < 3 {
		t.Fatalf("%d of 3 ranks started", len(pids))
	}
	if err := syscall.Kill(pids[1], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		syscall.Kill(pids[1], syscall.SIGKILL)
		t.Fatal("Run still waits for the stopped rank a minute after cancel")
	}
}

// A job that cannot start all its ranks stops starting them once one has
// failed: rank 0 exits at once, and of 300 ranks only those started before
// its exit was seen ever run (before, all 300 were started, then stopped).
func TestFailedRankStopsTheStarting(t *testing.T) {
	const n = 300
	j := job(t, "", n)
	j.Path, j.Args = "/bin/sh", []string{"-c", `if [ "$RANK_ID" = 0 ]; then echo rank 0 gives up; exit 3; fi; exec sleep 60`}
	err := Run(context.Background(), j)
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(err.Error(), "rank 0 (device 0) exit status 3") {
		t.Fatalf("err = %v", err)
	}
	started := 0
	for r := range n {
		if _, err := os.Stat(DeviceDir(j.Dir, r)); err == nil {
			started++
		}
	}
	if started == n {
		t.Errorf("all %d ranks were started after rank 0 had failed", n)
	}
	t.Logf("%d of %d ranks started", started, n)
}
