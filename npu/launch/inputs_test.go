package launch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What the launcher would trip over is refused before it starts: a
// hostfile that is a device (/dev/zero was read without end), a
// directory, empty; srun outside an allocation unless asked for.
func TestLauncherInputsCheckedBeforeLaunch(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "hosts")
	if err := os.WriteFile(good, []byte("10.0.0.1 slots=8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	none := env(nil)
	for _, tc := range []struct {
		job    ExternalJob
		getenv func(string) string
		want   string
	}{
		{ExternalJob{Launcher: MPIRun, Hostfile: good}, none, ""},
		{ExternalJob{Launcher: MPIRun}, none, ""},
		{ExternalJob{Launcher: MPIRun, Hostfile: "/dev/zero"}, none, "launch: hostfile /dev/zero: is a character device, not a regular file"},
		{ExternalJob{Launcher: MPIRun, Hostfile: dir}, none, "not a regular file"},
		{ExternalJob{Launcher: MPIRun, Hostfile: empty}, none, "lists no hosts"},
		{ExternalJob{Launcher: MPIRun, Hostfile: filepath.Join(dir, "missing")}, none, "no such file"},
		{ExternalJob{Launcher: Srun}, none, "srun outside a Slurm allocation (SLURM_JOB_ID is not set)"},
		{ExternalJob{Launcher: Srun}, env(map[string]string{"SLURM_JOB_ID": "12"}), ""},
		{ExternalJob{Launcher: Srun}, env(map[string]string{EnvSrunAllocate: "1"}), ""},
	} {
		err := checkLauncherInputs(context.Background(), tc.job, tc.getenv)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %q: %v", tc.job.Launcher, tc.job.Hostfile, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q: %v, want %q", tc.job.Launcher, tc.job.Hostfile, err, tc.want)
		}
	}
}
