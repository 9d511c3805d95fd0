package train

// The collective endpoint of a job: the port range its ranks listen on and
// the secret they authenticate each other with, chosen here before any
// rank starts. The ranks' side is npu/job.

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// freeBasePort picks a port range in which every rank's listen address
// (device_ip or host_nic_ip) and port can be bound now, so that
// concurrent jobs on one machine do not collide. A
// rank table naming addresses of other machines cannot be checked here;
// the collective layer refuses non-loopback addresses on its own.
// Each rank listens on blocks ports (job.PortBlocks), base+b·ranks+i for
// rank i and block b.
func freeBasePort(t *ranktable.RankTable, blocks int) (int, error) {
	ranks, err := t.Ranks()
	if err != nil {
		return 0, err
	}
	for try := 0; try < 50; try++ {
		base := 20000 + rand.IntN(30000)
		free := true
		for b := 0; b < blocks && free; b++ {
			for i, r := range ranks {
				ln, err := net.Listen("tcp", net.JoinHostPort(r.ListenIP(), fmt.Sprint(base+b*len(ranks)+i)))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
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
//
// A pipeline job's ranks listen on job.PortBlocks blocks of ports: its
// sub-communicators take base+b·devices+rank for block b.
func basePort(w With, t *ranktable.RankTable, share hostShare) (int, error) {
	blocks := job.PortBlocks(w.PipelineStages)
	if !share.SpansHosts() && w.CollectiveBasePort == 0 {
		return freeBasePort(t, blocks)
	}
	base := w.CollectiveBasePort
	if base == 0 {
		base = collective.DefaultBasePort
	}
	if base+blocks*share.Size-1 > 65535 {
		return 0, fmt.Errorf("collective_base_port %d leaves no port for rank %d (ports go up to 65535; each rank needs %d)", base, share.Size-1, blocks)
	}
	for b := range blocks {
		for _, r := range share.Ranks {
			addr := net.JoinHostPort(r.ListenIP(), fmt.Sprint(base+b*share.Size+r.RankID))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return 0, fmt.Errorf("rank %d cannot listen on %s (another job?): set with.collective_base_port to the start of %d free ports, the same on every server: %w", r.RankID, addr, blocks*share.Size, err)
			}
			ln.Close()
		}
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
