package job

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/npu/trainer"
)

// multiHostConnectWait is how long the ranks of a job that spans hosts
// wait for their peers to come up, at least: the other servers start the
// same pipeline by hand or by a script, not all in the same second.
const multiHostConnectWait = 5 * time.Minute

// joinCollective connects this rank to its peers and wires the trainer's
// gradient reduction (and parameter broadcast) through the communicator;
// it reports the transport on out.
// The configuration it joined with is returned for the pipeline's
// sub-communicators.
func joinCollective(ctx context.Context, cfg Config, rank int, tc *trainer.Config, out io.Writer) (*collective.Comm, collective.Config, error) {
	var none collective.Config
	tablePath := os.Getenv("RANK_TABLE_FILE")
	if tablePath == "" {
		return nil, none, fmt.Errorf("RANK_TABLE_FILE is not set")
	}
	t, problems, err := ranktable.Load(tablePath)
	if err != nil {
		return nil, none, err
	}
	if problems.HasErrors() {
		return nil, none, fmt.Errorf("rank table %s: %w", tablePath, problems.Err())
	}
	cc, err := collective.FromRankTable(t, rank, cfg.BasePort)
	if err != nil {
		return nil, none, err
	}
	if cc.Secret, err = os.ReadFile(cfg.SecretFile); err != nil {
		return nil, none, fmt.Errorf("job secret: %w", err)
	}
	cc.Timeout = cfg.timeout()
	if cfg.SpansHosts {
		cc.ConnectTimeout = max(cc.Timeout, multiHostConnectWait)
	}
	// A table whose servers are real addresses describes a real cluster:
	// its ranks on other servers are reached over the network. Each rank
	// still listens on its own address only (device_ip or host_nic_ip).
	cc.AllowRemote = serversAreReal(t)
	cc.Transport = collective.Transport(cfg.Transport)
	comm, err := collective.Init(ctx, cc)
	if err != nil {
		return nil, none, err
	}
	if s := comm.Servers(); s > 1 && comm.Transport() == collective.TransportShm {
		fmt.Fprintf(out, "collective: rank %d of %d, transport shm within each of %d servers, tcp between them\n", rank, cc.Size, s)
	} else {
		fmt.Fprintf(out, "collective: rank %d of %d, transport %s\n", rank, cc.Size, comm.Transport())
	}
	wireCollective(comm, cfg, tc, out)
	return comm, cc, nil
}

// wireCollective makes the trainer reduce its gradients, agree on the
// step to resume from and (with ParameterBroadcast) take rank 0's initial
// parameters through comm.
func wireCollective(comm *collective.Comm, cfg Config, tc *trainer.Config, out io.Writer) {
	op := collective.Sum
	if cfg.GradientsMean {
		op = collective.Mean
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
	// The evaluations after each epoch add up the ranks' counts.
	tc.SumAcross = func(ctx context.Context, v []float32) error {
		return comm.AllReduce(ctx, v, collective.Sum)
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
	if cfg.ParameterBroadcast {
		tc.Broadcast = func(ctx context.Context, values []float32) error {
			return comm.Broadcast(ctx, values, 0)
		}
	}
}

// serversAreReal reports whether every server_id of t is an IP address,
// not a placeholder such as the seeds' "10.*.*.*": only then is the table
// a real cluster's, whose ranks may talk over the network.
func serversAreReal(t *ranktable.RankTable) bool {
	for _, s := range t.ServerList {
		if _, err := netip.ParseAddr(s.ServerID); err != nil {
			return false
		}
	}
	return len(t.ServerList) > 0
}

// RemoveShmLeftovers removes the shared-memory files of the job's ranks
// that a killed rank may have left in /dev/shm; rankTable is the job's
// rank table file.
func RemoveShmLeftovers(rankTable string, cfg Config) error {
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
