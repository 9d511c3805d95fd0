package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ranktable"
)

// externalRank is the body of a rank that the tests start through mpirun:
// it attaches, then behaves as EXTERNAL_RANK_DO says for the rank named in
// EXTERNAL_RANK_WHO (every other rank sleeps until stopped, or says hello
// and ends when there is nothing to do).
func externalRank() (code int) {
	a, err := Attach()
	if a == nil {
		fmt.Fprintln(os.Stderr, "not attached:", err)
		return 5
	}
	defer func() {
		if code != 0 {
			a.Exit(fmt.Errorf("exit status %d", code))
		} else {
			a.Exit(nil)
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		a.Exit(err)
		os.Exit(4)
	}
	writePid()
	fmt.Printf("rank %s device %s size %s\n", os.Getenv("RANK_ID"), os.Getenv("DEVICE_ID"), os.Getenv("RANK_SIZE"))
	fmt.Fprintf(a.Events(), "hello from %d\n", a.Rank.RankID)
	me := os.Getenv("EXTERNAL_RANK_WHO") == strconv.Itoa(a.Rank.RankID)
	switch do := os.Getenv("EXTERNAL_RANK_DO"); {
	case do == "" || do == "sleep" && !me:
		if do == "sleep" {
			time.Sleep(time.Minute)
		}
		return 0
	case !me:
		time.Sleep(time.Minute)
		return 0
	case do == "fail":
		fmt.Println("rank gives up: the data is bad")
		return 3
	case do == "kill":
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	return 6
}

func needMPIRun(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) is not installed")
	}
}

// syncBuffer collects events from the launcher's reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mpiJob(t *testing.T, n int, env ...string) (ExternalJob, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	// Several hosts' tables are the caller's to write.
	table := filepath.Join(dir, "rank_table.json")
	if n <= 8 {
		var err error
		if table, err = LocalRankTable(dir, n); err != nil {
			t.Fatal(err)
		}
	}
	events := &syncBuffer{}
	return ExternalJob{
		Launcher: MPIRun, Path: os.Args[0], Args: []string{"-test.run=^$"}, Dir: dir, RankTable: table,
		Env: append([]string{"LAUNCH_TEST_MODE=external"}, env...), Grace: 2 * time.Second, Events: events,
	}, events
}

// noneAlive fails the test for every rank process of the job still alive.
func noneAlive(t *testing.T, dir string, n int) {
	t.Helper()
	// A rank notices its launcher is gone within parentPoll.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var live []int
		for _, pid := range rankPids(t, dir, n) {
			if alive(pid) {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range live {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("rank processes %v still alive", live)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMPIRunEightRanks(t *testing.T) {
	needMPIRun(t)
	j, events := mpiJob(t, 8)
	if err := RunExternal(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	hostfile, err := os.ReadFile(filepath.Join(j.Dir, "hostfile"))
	if err != nil || string(hostfile) != "127.0.0.1 slots=8\n" {
		t.Errorf("hostfile = %q, %v", hostfile, err)
	}
	var hellos []string
	for _, l := range strings.Split(strings.TrimSpace(events.String()), "\n") {
		hellos = append(hellos, l)
	}
	slices.Sort(hellos)
	var want []string
	for r := 0; r < 8; r++ {
		want = append(want, fmt.Sprintf("hello from %d", r))
	}
	slices.Sort(want)
	if !slices.Equal(hellos, want) {
		t.Errorf("events = %q, want one hello from each rank", hellos)
	}
	for r := 0; r < 8; r++ {
		log, err := os.ReadFile(LogPath(j.Dir, r))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("rank %d device %d size 8\n", r, r); string(log) != want {
			t.Errorf("train.log%d = %q, want %q", r, log, want)
		}
		envLog := filepath.Join(DeviceDir(j.Dir, r), fmt.Sprintf("env%d.log", r))
		env, err := os.ReadFile(envLog)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range []string{fmt.Sprintf("RANK_ID=%d", r), fmt.Sprintf("DEVICE_ID=%d", r), "RANK_SIZE=8", "RANK_TABLE_FILE=" + j.RankTable, fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r)} {
			if !slices.Contains(strings.Split(string(env), "\n"), kv) {
				t.Errorf("env%d.log lacks %s", r, kv)
			}
		}
		if st, err := os.Stat(envLog); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("env%d.log: %v, want mode 0600", r, err)
		}
	}
	noneAlive(t, j.Dir, 8)
}

func TestMPIRunNamesTheFailedRank(t *testing.T) {
	needMPIRun(t)
	j, _ := mpiJob(t, 8, "EXTERNAL_RANK_WHO=3", "EXTERNAL_RANK_DO=fail")
	err := RunExternal(context.Background(), j)
	host, _ := os.Hostname()
	want := fmt.Sprintf("rank 3 (host %s, server 127.0.0.1) exit status 3: rank 3 device 3 size 8 | rank gives up: the data is bad; mpirun exit status", host)
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("err = %v\nwant it to contain %q", err, want)
	}
	noneAlive(t, j.Dir, 8)
}

func TestMPIRunNamesAKilledRank(t *testing.T) {
	needMPIRun(t)
	j, _ := mpiJob(t, 8, "EXTERNAL_RANK_WHO=5", "EXTERNAL_RANK_DO=kill")
	err := RunExternal(context.Background(), j)
	host, _ := os.Hostname()
	want := fmt.Sprintf("rank 5 (host %s, server 127.0.0.1) ended without reporting why (killed by a signal?)", host)
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("err = %v\nwant it to contain %q", err, want)
	}
	noneAlive(t, j.Dir, 8)
}

func TestMPIRunCancelStopsEveryRank(t *testing.T) {
	needMPIRun(t)
	j, _ := mpiJob(t, 8, "EXTERNAL_RANK_DO=sleep")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunExternal(ctx, j) }()
	deadline := time.Now().Add(30 * time.Second)
	for len(rankPids(t, j.Dir, 8)) < 8 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(rankPids(t, j.Dir, 8)); n < 8 {
		cancel()
		<-done
		t.Fatalf("%d of 8 ranks started", n)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("RunExternal did not return a minute after cancel")
	}
	noneAlive(t, j.Dir, 8)
}

// TestMPIRunRankOnTheWrongHost: a rank table whose device_ip addresses are
// not this host's, with a hostfile that sends every rank here: each rank
// refuses, naming where mpirun put it and where the table wants it.
func TestMPIRunRankOnTheWrongHost(t *testing.T) {
	needMPIRun(t)
	j, _ := mpiJob(t, 8)
	tbl, err := ranktable.Generate(ranktable.GenerateOptions{Devices: 8, Servers: []string{"192.0.2.10"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j.RankTable, tbl.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	j.Hostfile = filepath.Join(j.Dir, "my-hosts")
	if err := os.WriteFile(j.Hostfile, []byte("localhost slots=8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = RunExternal(context.Background(), j)
	host, _ := os.Hostname()
	want := fmt.Sprintf("mpirun placed rank %%d on host %s, but the rank table puts it on server 192.0.2.10 (device_ip 192.", host)
	var r int
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf(want, 0)) {
		for r = 1; r < 8 && !strings.Contains(fmt.Sprint(err), fmt.Sprintf(want, r)); r++ {
		}
		if r == 8 {
			t.Fatalf("err = %v\nwant it to contain %q for some rank", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(j.Dir, "hostfile")); err == nil {
		t.Error("a hostfile was generated although the job gives one")
	}
}

func TestPlaceFromEnv(t *testing.T) {
	for _, tc := range []struct {
		l    Launcher
		env  map[string]string
		want launcherPlace
		err  string
	}{
		{MPIRun, map[string]string{"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, launcherPlace{9, 16, 1}, ""},
		{MPIRun, map[string]string{"PMIX_RANK": "2", "PMI_SIZE": "4"}, launcherPlace{2, 4, -1}, ""},
		{Srun, map[string]string{"SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_LOCALID": "7", "PMI_RANK": "1"}, launcherPlace{7, 8, 7}, ""},
		{Srun, map[string]string{"PMI_RANK": "3", "PMI_SIZE": "8"}, launcherPlace{3, 8, -1}, ""},
		{Srun, map[string]string{"SLURM_NTASKS": "8"}, launcherPlace{}, "none of SLURM_PROCID, PMIX_RANK, PMI_RANK is set: was this process started by srun?"},
		{MPIRun, map[string]string{"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "8"}, launcherPlace{}, `OMPI_COMM_WORLD_RANK="x" is not a rank number`},
		{MPIRun, map[string]string{"OMPI_COMM_WORLD_RANK": "8", "OMPI_COMM_WORLD_SIZE": "8"}, launcherPlace{}, "mpirun says rank 8 of a job of 8"},
	} {
		got, err := placeFromEnv(tc.l, func(k string) string { return tc.env[k] })
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s %v: err = %v, want %q", tc.l, tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %v = %+v, %v; want %+v", tc.l, tc.env, got, err, tc.want)
		}
	}
}

func TestLauncherCommand(t *testing.T) {
	tbl, err := ranktable.Generate(ranktable.GenerateOptions{Hosts: 2, Devices: 8, Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	job := ExternalJob{
		Launcher: MPIRun, Path: "/opt/mspipe", Args: []string{"__npu-worker", "/runs/x/worker.json"},
		Dir: "/runs/x", RankTable: "/runs/x/rt.json", Env: []string{"A=1", "RANK_SIZE=16"},
		LauncherArgs: []string{"--mca", "btl_tcp_if_include", "eth0; rm -rf /"},
	}
	args, hostfile, err := LauncherCommand(job, tbl, 0)
	want := []string{"-np", "16", "--hostfile", "/runs/x/hostfile", "--map-by", "slot", "--allow-run-as-root",
		"-x", EnvLauncher, "-x", EnvJobDir, "-x", "RANK_TABLE_FILE", "-x", "RANK_SIZE", "-x", "A",
		"--mca", "btl_tcp_if_include", "eth0; rm -rf /", "/opt/mspipe", "__npu-worker", "/runs/x/worker.json"}
	if err != nil || !slices.Equal(args, want) || hostfile != "/runs/x/hostfile" {
		t.Errorf("mpirun args = %q, %q, %v\nwant %q", args, hostfile, err, want)
	}
	if got := string(Hostfile(tbl)); got != "127.0.0.1 slots=8\n127.0.0.2 slots=8\n" {
		t.Errorf("hostfile = %q", got)
	}
	if args, _, _ := LauncherCommand(job, tbl, 1000); slices.Contains(args, "--allow-run-as-root") {
		t.Error("--allow-run-as-root for a user other than root")
	}
	job.Launcher, job.LauncherArgs, job.ExitWait = Srun, []string{"--partition=debug"}, 90*time.Second
	args, hostfile, err = LauncherCommand(job, tbl, 0)
	want = []string{"--ntasks", "16", "--nodes", "2", "--ntasks-per-node", "8", "--distribution", "block",
		"--kill-on-bad-exit=1", "--export", "ALL", "--wait", "90", "--partition=debug", "/opt/mspipe", "__npu-worker", "/runs/x/worker.json"}
	if err != nil || !slices.Equal(args, want) || hostfile != "" {
		t.Errorf("srun args = %q, %q, %v\nwant %q", args, hostfile, err, want)
	}
}

// TestLauncherOutputSortsLines: events go on, statuses are recorded, the
// rest is kept for errors, and a line in which two ranks' output ran
// together is counted and reported, not relayed.
func TestLauncherOutputSortsLines(t *testing.T) {
	events := &syncBuffer{}
	var warnings []string
	o := &launcherOutput{events: events, warn: func(s string) { warnings = append(warnings, s) }, ranks: map[int]*rankState{}}
	input := EventPrefix + `{"kind":"step"}` + "\n" +
		statusPrefix + `{"rank":1,"host":"h1","state":"start"}` + "\n" +
		statusPrefix + `{"rank":1,"host":"h1","state":"exit","error":"boom"}` + "\n" +
		"mpirun noticed that process rank 1 exited\n" +
		"half a line" + EventPrefix + `{"kind":"log"}` + "\n"
	o.read(strings.NewReader(input), true)
	o.finish()
	if got := events.String(); got != `{"kind":"step"}`+"\n" {
		t.Errorf("events = %q", got)
	}
	if r := o.ranks[1]; r == nil || !r.exited || r.err != "boom" || r.host != "h1" {
		t.Errorf("rank 1 = %+v", r)
	}
	if !slices.Equal(o.tail, []string{"mpirun noticed that process rank 1 exited"}) {
		t.Errorf("tail = %q", o.tail)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "1 line(s) with rank output run together") {
		t.Errorf("warnings = %q", warnings)
	}
}

// TestFailureBlamesWhomTheLauncherNames: rank 4 reports that rank 2 closed
// its connection before mpirun says that rank 2 was killed: the error
// names rank 2, the cause, not rank 4, the first to speak.
func TestFailureBlamesWhomTheLauncherNames(t *testing.T) {
	dir := t.TempDir()
	table, err := LocalRankTable(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	tbl, _, err := ranktable.Load(table)
	if err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	for r := 0; r < 8; r++ {
		fmt.Fprintf(&lines, "%s{\"rank\":%d,\"host\":\"h\",\"state\":\"start\"}\n", statusPrefix, r)
	}
	fmt.Fprintf(&lines, "%s{\"rank\":4,\"host\":\"h\",\"state\":\"exit\",\"error\":\"allreduce: rank 2 closed the connection\"}\n", statusPrefix)
	fmt.Fprintf(&lines, "%s{\"rank\":5,\"host\":\"h\",\"state\":\"exit\",\"error\":\"context canceled\"}\n", statusPrefix)
	lines.WriteString("mpirun noticed that process rank 2 with PID 0 on node h exited on signal 9 (Killed).\n")
	job := ExternalJob{Launcher: MPIRun, Dir: dir}
	noWord := strings.ReplaceAll(lines.String(), "mpirun noticed that process rank 2", "mpirun noticed that a process")
	for _, tc := range []struct {
		input string
		blame bool // rank 4 blames rank 2 (blame.json)
		want  string
	}{
		{lines.String(), false, "rank 2 (host h, server 127.0.0.1) ended without reporting why (killed by a signal?); mpirun exit status 137: mpirun noticed"},
		// Without the launcher's word or a blame, the first rank that
		// failed itself.
		{noWord, false, "rank 4 (host h, server 127.0.0.1) allreduce: rank 2 closed the connection; mpirun"},
		// Without the launcher's word, the first rank that failed itself,
		// and the rank it blames.
		{noWord, true, "rank 2 (host h, server 127.0.0.1) ended without reporting why"},
		// mpirun names rank 4, which exited first, blaming rank 2.
		{strings.ReplaceAll(lines.String(), "mpirun noticed that process rank 2", "Process name: [[1,1],4]"), true, "rank 2 (host h, server 127.0.0.1) ended without reporting why"},
	} {
		o := &launcherOutput{ranks: map[int]*rankState{}}
		o.read(strings.NewReader(tc.input), true)
		job.Blame = nil
		if tc.blame {
			job.Blame = func(r Rank) (int, bool) { return 2, r.RankID == 4 }
		}
		err := o.failure(context.Background(), job, tbl, errors.New("exit status 137"))
		if !errors.Is(err, ErrRankFailed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v\nwant it to contain %q", err, tc.want)
		}
	}
}

// TestPlaceInTable: a rank takes its device from the rank table, and a
// launcher that put it at another place on its server than the table does
// (hosts or slots in the wrong order) is refused before it trains.
func TestPlaceInTable(t *testing.T) {
	tbl, err := ranktable.Generate(ranktable.GenerateOptions{Hosts: 2, Devices: 8, Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	a := &Attached{Launcher: MPIRun, Host: "node1"}
	r, err := a.placeInTable(tbl, launcherPlace{rank: 9, size: 16, local: 1})
	if err != nil || r.RankID != 9 || r.DeviceID != 1 || r.HostIndex != 1 {
		t.Errorf("rank 9 at local rank 1 = %+v, %v; want rank 9, device 1 of server 1", r, err)
	}
	for _, tc := range []struct {
		place launcherPlace
		want  string
	}{
		{launcherPlace{rank: 9, size: 16, local: 3}, "mpirun placed rank 9 on host node1 as its local rank 3, but the rank table puts it on server"},
		{launcherPlace{rank: 2, size: 8, local: 2}, "mpirun started 8 ranks, but rank table"},
	} {
		if _, err := a.placeInTable(tbl, tc.place); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.place, err, tc.want)
		}
	}
}
