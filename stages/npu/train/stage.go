// Package train provides the npu/train built-in stage: it trains a model on
// the stage's cluster of simulated Ascend devices the way the seeds' run.sh
// does — one worker process per device, each in device{i}/ with
// DEVICE_ID, RANK_ID, RANK_SIZE and RANK_TABLE_FILE set, env{i}.log and
// train.log{i} written, checkpoints in device{i}/ckpt_{i}/ — and reports the
// loss, accuracy and throughput.
//
// Modes: stand_alone (one device), data_parallel (every device trains a
// full replica on its shard of the data; gradients are averaged by an
// AllReduce between the rank processes, as HCCL does: through shared memory
// within each server of the rank table, over TCP between servers), and the
// split modes semi_auto_parallel, auto_parallel and hybrid_parallel, which
// run on the operator-parallel engine (npu/shard; npu/job plans them).
//
// The stage is the process side of a job: its `with` schema and defaults
// (with.go), the checks before anything runs (check.go, paths.go), and
// execute (execute.go): it resolves `with` once into the rank job's typed
// config (npu/job.Config, worker.json), picks the collective's ports and
// secret (endpoint.go), starts the ranks and relays their events
// (relay.go). What every rank process runs is npu/job.
//
// Launchers (launcher.go): local starts this host's ranks itself — all of
// them, or on a rank table that spans servers the ranks whose address is
// this host's, as the seeds' run_cluster.sh runs on every server
// (hosts.go); mpirun and srun start every rank of the job from here.
//
// Every device has a memory capacity (device_memory, default an Ascend
// 910's 32 GiB) that the model's buffers are counted against; a job that
// does not fit fails naming the buffer, as a real device would.
//
// Progress is data: every rank reports each finished step (epoch, step,
// global step, loss, learning rate, images/s, device memory) as a JSON line
// on a pipe the stage hands it (npu/job's event stream), and the stage sends them on as
// step events, rank 0's printed lines as log records. train.log{i} keeps
// MindSpore's LossMonitor lines for people; nothing reads it back. A rank
// that fails sends its error on the same pipe, so the stage's error says
// why even when train.log{i} is on a full disk.
//
// BatchNorm in data_parallel keeps per-device statistics, as MindSpore does
// by default: each device normalizes with its own batch's mean and variance
// and updates its own moving statistics, so checkpoints of different ranks
// differ in bn*.moving_mean and bn*.moving_variance only.
package train

import (
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = job.Stage

// version is part of every cache key: bump it when results change.
const version = "1.2.0"

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Train a model on simulated Ascend devices, one process per device, MindSpore-style",
		Outputs: []plugins.OutputSpec{
			{Name: "checkpoints", Type: plugins.TypePath, Description: "directory holding device{i}/ckpt_{i}/ for every rank"},
			{Name: "checkpoint", Type: plugins.TypePath, Description: "rank 0's last checkpoint file"},
			{Name: "loss", Type: plugins.TypeFloat, Description: "loss of the last step (rank 0)"},
			{Name: "accuracy", Type: plugins.TypeFloat, Description: "held-out accuracy (0-1) of rank 0's model; -1 when eval is off"},
			{Name: "global_step", Type: plugins.TypeInt},
			{Name: "wall_time", Type: plugins.TypeFloat, Description: "seconds of training"},
			{Name: "images_per_second", Type: plugins.TypeFloat, Description: "training images per second, all devices of this host together (every device unless the rank table spans hosts)"},
			{Name: "peak_device_memory", Type: plugins.TypeInt, Description: "most memory in use at once on any device, in bytes"},
			{Name: "strategy", Type: plugins.TypeString, Description: "the strategy file of a split network (semi_auto/auto/hybrid parallel on several devices; with pipeline_stages, every stage's files merged, as ckpt/integrate and ckpt/reshard read it), or \"\""},
		},
		Defaults:     defaults(),
		Check:        check,
		CheckCluster: checkCluster,
		Execute:      execute,
	}
}
