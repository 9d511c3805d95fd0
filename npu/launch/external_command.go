package launch

// Building the launcher's command line and hostfile from the job and its
// rank table; RunExternal (external.go) runs them.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mspipe/mspipe/npu/ranktable"
)

// LauncherCommand returns the launcher's argument list for job (without
// the program name) and the hostfile it uses ("" for srun). It does not
// write the hostfile.
func LauncherCommand(job ExternalJob, t *ranktable.RankTable, euid int) (args []string, hostfile string, err error) {
	size := t.RankSize()
	if size == 0 {
		return nil, "", fmt.Errorf("launch: rank table %s has no devices", job.RankTable)
	}
	switch job.Launcher {
	case MPIRun:
		hostfile = job.Hostfile
		if hostfile == "" {
			hostfile = filepath.Join(job.Dir, "hostfile")
		}
		// --map-by slot fills the hostfile's hosts in order, slots at a
		// time: rank r lands on the server the rank table puts it on.
		args = []string{"-np", strconv.Itoa(size), "--hostfile", hostfile, "--map-by", "slot"}
		if euid == 0 {
			args = append(args, "--allow-run-as-root")
		}
		// -x NAME exports the variable with the value mpirun has, which
		// keeps values off the command line (ps shows it).
		for _, name := range exportedNames(job) {
			args = append(args, "-x", name)
		}
	case Srun:
		perNode := len(t.ServerList[0].Device)
		for _, s := range t.ServerList {
			if len(s.Device) != perNode {
				return nil, "", fmt.Errorf("launch: srun places the same number of ranks on every node, but rank table %s has servers with %d and %d devices", job.RankTable, perNode, len(s.Device))
			}
		}
		args = []string{
			"--ntasks", strconv.Itoa(size), "--nodes", strconv.Itoa(len(t.ServerList)),
			"--ntasks-per-node", strconv.Itoa(perNode), "--distribution", "block",
			"--kill-on-bad-exit=1", "--export", "ALL",
		}
		if job.ExitWait > 0 {
			args = append(args, "--wait", strconv.Itoa(int(max(job.ExitWait/time.Second, 1))))
		}
	default:
		return nil, "", fmt.Errorf("launch: %s is not an external launcher", job.Launcher)
	}
	args = append(args, job.LauncherArgs...)
	args = append(args, job.Path)
	return append(args, job.Args...), hostfile, nil
}

// exportedNames lists the variables a rank needs from the launcher's
// environment, in a fixed order.
func exportedNames(job ExternalJob) []string {
	names := []string{EnvLauncher, EnvJobDir, "RANK_TABLE_FILE", "RANK_SIZE"}
	for _, kv := range job.Env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// Hostfile returns an Open MPI hostfile for a rank table: its servers in
// table order, each with as many slots as it has devices.
func Hostfile(t *ranktable.RankTable) []byte {
	var b bytes.Buffer
	for _, s := range t.ServerList {
		fmt.Fprintf(&b, "%s slots=%d\n", s.ServerID, len(s.Device))
	}
	return b.Bytes()
}
