package train

import (
	"context"
	"fmt"
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

// freeBasePort picks a port range in which every rank's device_ip:port can
// be bound now, so that concurrent jobs on one machine do not collide. A
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
			ln, err := net.Listen("tcp", net.JoinHostPort(r.DeviceIP, fmt.Sprint(base+i)))
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
	return 0, fmt.Errorf("no free port range for %d ranks on their device_ip addresses (are they addresses of this machine?)", len(ranks))
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
// gradient reduction (and parameter broadcast) through the communicator.
func joinCollective(ctx context.Context, cfg WorkerConfig, rank int, tc *trainer.Config) (*collective.Comm, error) {
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
	comm, err := collective.Init(ctx, cc)
	if err != nil {
		return nil, err
	}
	op := collective.Mean
	if cfg.With.GradientsMean != nil && !*cfg.With.GradientsMean {
		op = collective.Sum
	}
	tc.Reduce = func(ctx context.Context, grads []float32) error {
		return comm.AllReduce(ctx, grads, op)
	}
	if cfg.With.ParameterBroadcast {
		tc.Broadcast = func(ctx context.Context, values []float32) error {
			return comm.Broadcast(ctx, values, 0)
		}
	}
	tc.NumShards, tc.ShardID = cc.Size, rank
	return comm, nil
}
