// Package launch provides the npu/launch built-in stage: it starts the
// user's own per-device command the way the seeds' run.sh does — one
// process per device of the stage's cluster, each in device{i}/ with
// DEVICE_ID, RANK_ID, RANK_SIZE and RANK_TABLE_FILE set, env{i}.log and
// train.log{i} written — and fails when any of them fails, stopping the
// others. It is how an existing MindSpore training script runs under
// mspipe on a real Ascend host.
package launch

import (
	"context"
	"fmt"
	osexec "os/exec"
	"sort"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
	execstage "github.com/mspipe/mspipe/stages/exec"
)

// Name is the stage's `uses` name.
const Name = "npu/launch"

const version = "1.0.0"

// With is the stage's `with` block.
type With struct {
	Command execstage.Command `json:"command"`
	Env     map[string]string `json:"env,omitempty" description:"environment variables added for every device's process"`
}

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Run your own per-device command, one process per device with the seeds' environment",
		Outputs: []plugins.OutputSpec{
			{Name: "dir", Type: plugins.TypePath, Description: "directory holding device{i}/ for every rank"},
			{Name: "devices", Type: plugins.TypeInt},
		},
		Execute: execute,
	}
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	req := sc.Request()
	devices := max(req.Cluster.Devices, 1)
	jobDir := sc.WorkDir()
	// Each rank writes device{i}/ here: a link planted in it would take
	// those writes out.
	if _, err := userfile.WritableWithin(jobDir, "."); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	table := req.Cluster.RankTable
	if table == "" {
		var err error
		if table, err = launch.LocalRankTable(jobDir, devices); err != nil {
			return nil, err
		}
	}
	path, args := "/bin/sh", []string{"-c", w.Command.Line}
	if w.Command.Argv != nil {
		p, err := osexec.LookPath(w.Command.Argv[0])
		if err != nil {
			return nil, fmt.Errorf("command: %w", err)
		}
		path, args = p, w.Command.Argv[1:]
	}
	var env []string
	keys := make([]string, 0, len(w.Env))
	for k := range w.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+w.Env[k])
	}
	ranks := make([]launch.Rank, devices)
	for i := range ranks {
		ranks[i] = launch.Rank{RankID: i, DeviceID: i % 8}
	}
	sc.Info(fmt.Sprintf("starting %d device process(es)", devices))
	if err := launch.Run(ctx, launch.Job{Path: path, Args: args, Dir: jobDir, RankSize: devices, Ranks: ranks, RankTable: table, Env: env}); err != nil {
		return nil, err
	}
	return map[string]any{"dir": jobDir, "devices": devices}, nil
}
