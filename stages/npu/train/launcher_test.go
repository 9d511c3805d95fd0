package train

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
)

func TestLauncherOptionsBelongToTheirLauncher(t *testing.T) {
	for _, tc := range []struct {
		w    With
		path string
		msg  string
	}{
		{With{LauncherArgs: []string{"--mca", "x"}}, "/launcher_args", "launcher_args are for launcher mpirun or srun; the local launcher takes none"},
		{With{Launcher: launch.Srun, Hostfile: "/etc/hosts.mpi"}, "/hostfile", "a hostfile is for launcher mpirun, not srun"},
		{With{Launcher: launch.MPIRun, Hostfile: "hosts"}, "/hostfile", `hostfile "hosts": give an absolute path`},
		{With{Launcher: launch.MPIRun, Hostfile: "/etc/hosts.mpi", LauncherArgs: []string{"--bind-to", "none"}}, "", ""},
		{With{Launcher: launch.Srun, LauncherArgs: []string{"--partition=npu"}}, "", ""},
	} {
		problems := check(tc.w)
		switch {
		case tc.path == "" && len(problems) > 0:
			t.Errorf("%+v: problems %v, want none", tc.w, problems)
		case tc.path != "" && (len(problems) != 1 || problems[0].Path != tc.path || problems[0].Message != tc.msg):
			t.Errorf("%+v: problems %v, want %s: %s", tc.w, problems, tc.path, tc.msg)
		}
	}
	var w With
	err := json.Unmarshal([]byte(`{"data": "/d", "launcher": "pbs"}`), &w)
	if err == nil || !strings.Contains(err.Error(), `unknown launcher "pbs" (valid: local, mpirun, srun)`) {
		t.Errorf("launcher pbs: err = %v", err)
	}
	if err := json.Unmarshal([]byte(`{"data": "/d", "launcher": "srun"}`), &w); err != nil || w.Launcher != launch.Srun {
		t.Errorf("launcher srun: %v, %v", w.Launcher, err)
	}
}

// TestRankWithoutTheRunDirectory starts the worker as mpirun would on a
// host that does not see the run directory (the launcher's variables, a
// worker.json path that is not there): the rank fails saying the run
// directory must be shared, in its train.log and in the exit status it
// reports on the launcher's stdout.
func TestRankWithoutTheRunDirectory(t *testing.T) {
	dir := t.TempDir()
	table, err := launch.LocalRankTable(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, jobDir, want string
		logged             bool // whether the rank got as far as its train.log
	}{
		{"no job directory", filepath.Join(dir, "elsewhere"), "is not here: the run directory must be on a filesystem every host sees", false},
		{"no worker.json", dir, "worker config on host ", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], job.Command, filepath.Join(tc.jobDir, "worker.json"))
			cmd.Env = append(os.Environ(), launch.EnvLauncher+"=mpirun", launch.EnvJobDir+"="+tc.jobDir,
				"RANK_TABLE_FILE="+table, "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1", "OMPI_COMM_WORLD_LOCAL_RANK=0")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err == nil {
				t.Fatal("the rank succeeded")
			}
			if !strings.Contains(stdout.String(), `"state":"exit","error":`) || !strings.Contains(stdout.String(), tc.want) {
				t.Errorf("stdout (the launcher's) = %q, want an exit status with %q", stdout.String(), tc.want)
			}
			log, _ := os.ReadFile(launch.LogPath(tc.jobDir, 0))
			if tc.logged {
				if !strings.Contains(string(log), tc.want) || !strings.Contains(string(log), "the run directory must be on a filesystem every host sees") {
					t.Errorf("train.log0 = %q, want the error", log)
				}
			} else if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr = %q, want the error", stderr.String())
			}
		})
	}
}
