package train

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/npu/trainer"
)

// defaultCollectiveTimeout bounds every wait for a peer rank.
const defaultCollectiveTimeout = 60 * time.Second

func collectiveTimeout(w With) time.Duration {
	if w.CollectiveTimeout > 0 {
		return time.Duration(w.CollectiveTimeout)
	}
	return defaultCollectiveTimeout
}

// freeBasePort picks a port range in which every rank's listen address
// (device_ip or host_nic_ip) and port can be bound now, so that
// concurrent jobs on one machine do not collide. A
// rank table naming addresses of other machines cannot be checked here;
// the collective layer refuses non-loopback addresses on its own.
func freeBasePort(t *ranktable.RankTable) (int, error) {
	ranks, err := t.Ranks()
	if err != nil {
		return 0, err
	}
	for try := 0; try < 50; try++ {
		base := 20000 + rand.IntN(30000)
		free := true
		for i, r := range ranks {
			ln, err := net.Listen("tcp", net.JoinHostPort(r.ListenIP(), fmt.Sprint(base+i)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no free port range for %d ranks on their device_ip (or host_nic_ip) addresses (are they addresses of this machine?)", len(ranks))
}

// EnvJobSecretFile names the file holding the job secret. A job whose
// ranks span several hosts needs it: the hosts start their ranks without
// talking to each other first, so they cannot agree on a fresh secret.
// Every server has its own copy of the same file.
const EnvJobSecretFile = "MSPIPE_JOB_SECRET_FILE"

// maxSecretFileBytes bounds what is read from EnvJobSecretFile.
const maxSecretFileBytes = 1 << 20

// multiHostConnectWait is how long the ranks of a job that spans hosts
// wait for their peers to come up, at least: the other servers start the
// same pipeline by hand or by a script, not all in the same second.
const multiHostConnectWait = 5 * time.Minute

// makeSecretHint is the command the refusals suggest.
const makeSecretHint = "umask 077 && head -c 32 /dev/urandom > job.secret, copy it to every server (scp -p), and export " + EnvJobSecretFile + "=/path/to/job.secret on each"

// sharedSecretFile returns the absolute path of the job secret file named
// by EnvJobSecretFile, after checking that it is a regular file only its
// owner can read or write, of at least collective.MinSecretBytes. It
// returns "" when the variable is unset and the job runs on this host
// only; a job spanning hosts is refused without it.
func sharedSecretFile(spansHosts bool) (string, error) {
	path := os.Getenv(EnvJobSecretFile)
	if path == "" {
		if spansHosts {
			return "", fmt.Errorf("the rank table spans several hosts, so every host must use the same job secret: none given (%s is not set); make one: %s", EnvJobSecretFile, makeSecretHint)
		}
		return "", nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s=%s: %w", EnvJobSecretFile, path, err)
	}
	st, err := os.Stat(abs)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: %w", EnvJobSecretFile, err)
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%s=%s: not a regular file", EnvJobSecretFile, path)
	case st.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s=%s: mode %04o lets others read or write the job secret: want 0600 or stricter (chmod 600 %s)", EnvJobSecretFile, path, st.Mode().Perm(), path)
	case st.Size() < collective.MinSecretBytes:
		return "", fmt.Errorf("%s=%s: %d bytes, want at least %d random bytes (%s)", EnvJobSecretFile, path, st.Size(), collective.MinSecretBytes, makeSecretHint)
	case st.Size() > maxSecretFileBytes:
		return "", fmt.Errorf("%s=%s: %d bytes, more than a job secret needs (at most %d)", EnvJobSecretFile, path, st.Size(), maxSecretFileBytes)
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", fmt.Errorf("%s: %w", EnvJobSecretFile, err)
	}
	f.Close()
	return abs, nil
}

// basePort chooses rank 0's collective port. A job spanning hosts uses
// with.collective_base_port or collective.DefaultBasePort, as every
// server must compute the same addresses on its own; a job on this host
// only takes with.collective_base_port when set, else a free range.
// Either way the ports of this host's ranks must be free now.
func basePort(w With, t *ranktable.RankTable, share hostShare) (int, error) {
	if !share.SpansHosts() && w.CollectiveBasePort == 0 {
		return freeBasePort(t)
	}
	base := w.CollectiveBasePort
	if base == 0 {
		base = collective.DefaultBasePort
	}
	if base+share.Size-1 > 65535 {
		return 0, fmt.Errorf("collective_base_port %d leaves no port for rank %d (ports go up to 65535)", base, share.Size-1)
	}
	for _, r := range share.Ranks {
		addr := net.JoinHostPort(r.ListenIP(), fmt.Sprint(base+r.RankID))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("rank %d cannot listen on %s (another job?): set with.collective_base_port to the start of %d free ports, the same on every server: %w", r.RankID, addr, share.Size, err)
		}
		ln.Close()
	}
	return base, nil
}

// writeSecret writes a fresh job secret, readable by this user only.
func writeSecret(jobDir string) (string, error) {
	secret, err := collective.NewSecret()
	if err != nil {
		return "", err
	}
	path := filepath.Join(jobDir, "job.secret")
	_ = os.Remove(path)
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		return "", fmt.Errorf("write job secret: %w", err)
	}
	return path, nil
}

// joinCollective connects this rank to its peers and wires the trainer's
// gradient reduction (and parameter broadcast) through the communicator;
// it reports the transport on out.
func joinCollective(ctx context.Context, cfg WorkerConfig, rank int, tc *trainer.Config, out io.Writer) (*collective.Comm, error) {
	tablePath := os.Getenv("RANK_TABLE_FILE")
	if tablePath == "" {
		return nil, fmt.Errorf("RANK_TABLE_FILE is not set")
	}
	t, problems, err := ranktable.Load(tablePath)
	if err != nil {
		return nil, err
	}
	if problems.HasErrors() {
		return nil, fmt.Errorf("rank table %s: %w", tablePath, problems.Err())
	}
	cc, err := collective.FromRankTable(t, rank, cfg.BasePort)
	if err != nil {
		return nil, err
	}
	if cc.Secret, err = os.ReadFile(cfg.SecretFile); err != nil {
		return nil, fmt.Errorf("job secret: %w", err)
	}
	cc.Timeout = collectiveTimeout(cfg.With)
	if cfg.SpansHosts {
		cc.ConnectTimeout = max(cc.Timeout, multiHostConnectWait)
	}
	// A table whose servers are real addresses describes a real cluster:
	// its ranks on other servers are reached over the network. Each rank
	// still listens on its own address only (device_ip or host_nic_ip).
	cc.AllowRemote = serversAreReal(t)
	if cfg.With.CollectiveTransport != "" {
		if cc.Transport, err = collective.ParseTransport(cfg.With.CollectiveTransport); err != nil {
			return nil, err
		}
	}
	comm, err := collective.Init(ctx, cc)
	if err != nil {
		return nil, err
	}
	if s := comm.Servers(); s > 1 && comm.Transport() == collective.TransportShm {
		fmt.Fprintf(out, "collective: rank %d of %d, transport shm within each of %d servers, tcp between them\n", rank, cc.Size, s)
	} else {
		fmt.Fprintf(out, "collective: rank %d of %d, transport %s\n", rank, cc.Size, comm.Transport())
	}
	op := collective.Mean
	if cfg.With.GradientsMean != nil && !*cfg.With.GradientsMean {
		op = collective.Sum
	}
	// Gradients live in the communicator's memory: with the shared-memory
	// transport (every rank on this host) the AllReduce then reads the
	// other ranks' gradients in place instead of sending them over TCP.
	tc.AllocGrads = func(ctx context.Context, n int) ([]float32, error) {
		buf, err := comm.Alloc(ctx, n)
		if err == nil && comm.Transport() == collective.TransportShm && !comm.IsShared(buf) {
			fmt.Fprintf(out, "collective: no shared memory for the gradients (is %s full?): AllReduce goes over TCP\n", collective.DefaultShmDir)
		}
		return buf, err
	}
	tc.Reduce = func(ctx context.Context, grads []float32) error {
		return comm.AllReduce(ctx, grads, op)
	}
	tc.StepRange = func(ctx context.Context, step int) (lo, hi int, err error) {
		if step > 1<<24 {
			return 0, 0, fmt.Errorf("step %d: too large to agree on exactly in float32", step)
		}
		// One Min reduction gives the smallest step and, negated, the largest.
		buf := []float32{float32(step), -float32(step)}
		if err := comm.AllReduce(ctx, buf, collective.Min); err != nil {
			return 0, 0, err
		}
		return int(buf[0]), int(-buf[1]), nil
	}
	if cfg.With.ParameterBroadcast {
		tc.Broadcast = func(ctx context.Context, values []float32) error {
			return comm.Broadcast(ctx, values, 0)
		}
	}
	return comm, nil
}

// removeShmLeftovers removes the shared-memory files of the job's ranks
// that a killed rank may have left in /dev/shm.
func removeShmLeftovers(rankTable string, cfg WorkerConfig) error {
	t, _, err := ranktable.Load(rankTable)
	if err != nil {
		return err
	}
	cc, err := collective.FromRankTable(t, 0, cfg.BasePort)
	if err != nil {
		return err
	}
	if cc.Secret, err = os.ReadFile(cfg.SecretFile); err != nil {
		return err
	}
	return collective.RemoveShmLeftovers(cc)
}
