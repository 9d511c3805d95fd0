//go:build slurm

package tests

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The Slurm test starts a single-node Slurm of its own: munged with a key
// it makes, slurmctld and slurmd in the foreground, every file in a
// temporary directory, on ports it picks. It needs root (slurmd starts
// jobs as their user) and Debian's munge and slurm-wlm. Run it with
//
//	go test -tags slurm -run Slurm ./tests

// daemon starts a foreground daemon in a process group of its own that
// dies with the test.
func daemon(t *testing.T, logFile string, name string, args ...string) {
	t.Helper()
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
}

// freePort returns a TCP port free on loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pollFor polls cond every 100ms for up to d.
func pollFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// startSlurm starts munged, slurmctld and slurmd and returns the path of
// their slurm.conf; srun finds it through SLURM_CONF.
func startSlurm(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a single-node Slurm needs root: not root")
	}
	for _, tool := range []string{"munged", "slurmctld", "slurmd", "srun", "sinfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: munge, slurm-wlm)", tool)
		}
	}
	// munged wants every directory above its socket searchable by all,
	// which t.TempDir's are not.
	dir, err := os.MkdirTemp("", "mspipe-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "munge.socket")
	daemon(t, filepath.Join(dir, "munged.out"), "munged", "--foreground",
		"--key-file="+keyFile, "--socket="+socket, "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--seed-file="+filepath.Join(dir, "munge.seed"))
	if !pollFor(10*time.Second, func() bool { _, err := os.Stat(socket); return err == nil }) {
		out, _ := os.ReadFile(filepath.Join(dir, "munged.out"))
		t.Fatalf("munged did not start: %s", out)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	for _, sub := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The node declares 8 CPUs whatever the machine has, so that srun
	// can place 8 tasks on it with --ntasks-per-node 8 (--overcommit does
	// not lift that limit); config_overrides lets slurmd accept it.
	conf := fmt.Sprintf(`ClusterName=mspipetest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/slurmctld.log
SlurmdLogFile=%[5]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SwitchType=switch/none
ReturnToService=2
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=8 RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
`, host, freePort(t), freePort(t), socket, dir)
	confFile := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon(t, filepath.Join(dir, "slurmctld.out"), "slurmctld", "-D", "-i", "-f", confFile)
	daemon(t, filepath.Join(dir, "slurmd.out"), "slurmd", "-D", "-f", confFile, "-N", host)
	idle := pollFor(30*time.Second, func() bool {
		cmd := exec.Command("sinfo", "-h", "-o", "%T")
		cmd.Env = append(os.Environ(), "SLURM_CONF="+confFile)
		out, err := cmd.Output()
		return err == nil && strings.TrimSpace(string(out)) == "idle"
	})
	if !idle {
		logs := ""
		for _, f := range []string{"slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"} {
			data, _ := os.ReadFile(filepath.Join(dir, f))
			logs += f + ":\n" + string(data) + "\n"
		}
		t.Fatalf("the Slurm node did not become idle in 30s\n%s", logs)
	}
	return confFile
}

// TestSlurmSrunTrainsLikeTheLocalLauncher runs the 8-device job of
// TestMPIRunTrainsLikeTheLocalLauncher through srun on a Slurm started
// here: checkpoints bit-identical to the local launcher's, every rank's
// steps in the run's events, SLURM_PROCID mapped to RANK_ID, nothing left.
func TestSlurmSrunTrainsLikeTheLocalLauncher(t *testing.T) {
	conf := startSlurm(t)
	t.Setenv("SLURM_CONF", conf)
	// The test is not inside an allocation: srun asks for one itself.
	t.Setenv("MSPIPE_SRUN_ALLOCATE", "1")
	w := newWorkspace(t)
	w.write("launchers.yaml", launcherSpec)
	local := w.run("run", "launchers.yaml")
	if local.code != 0 {
		t.Fatalf("local launcher: exit %d\n%s", local.code, local.stderr)
	}
	srun := w.run("run", "launchers.yaml", "--param", "launcher=srun", "--param", `launcher_args=["--job-name", "mspipe test"]`)
	if srun.code != 0 {
		t.Fatalf("srun: exit %d\n%s%s", srun.code, srun.stdout, srun.stderr)
	}
	if !strings.Contains(srun.stdout+srun.stderr, "--ntasks-per-node 8") || !strings.Contains(srun.stdout+srun.stderr, "--job-name mspipe test") {
		t.Errorf("the output does not show srun's command line with the launcher_args:\n%s%s", srun.stdout, srun.stderr)
	}
	srunDir := sameAsLocalLauncher(t, w, local, srun, "srun")
	for r := 0; r < 8; r++ {
		env, err := os.ReadFile(filepath.Join(srunDir, "stages", "train", fmt.Sprintf("device%d/env%d.log", r, r)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(env, []byte(fmt.Sprintf("\nRANK_ID=%d\n", r))) || !bytes.Contains(env, []byte(fmt.Sprintf("\nSLURM_PROCID=%d\n", r))) {
			t.Errorf("env%d.log lacks RANK_ID or SLURM_PROCID", r)
		}
	}
	if pids := w.waitNoProcesses(10 * time.Second); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}
