// Package builtin is the one list of the stages the mspipe binary serves
// itself (`mspipe __stage NAME`). A new built-in stage adds its Info here;
// the CLI's registry, the published schema (PipelineSchema) and the spec reference
// (tools/specdoc) all read this list.
package builtin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/schemas"
	cifarprepare "github.com/mspipe/mspipe/stages/cifar/prepare"
	ckptintegrate "github.com/mspipe/mspipe/stages/ckpt/integrate"
	ckptreshard "github.com/mspipe/mspipe/stages/ckpt/reshard"
	execstage "github.com/mspipe/mspipe/stages/exec"
	npueval "github.com/mspipe/mspipe/stages/npu/eval"
	npulaunch "github.com/mspipe/mspipe/stages/npu/launch"
	nputrain "github.com/mspipe/mspipe/stages/npu/train"
)

// ShellStage is the built-in whose `command` runs through a shell; the
// catalog treats its inputs as shell text.
const ShellStage = execstage.Name

// Infos returns every built-in stage, in the order `mspipe plugins` lists
// them.
func Infos() []plugins.Info {
	return []plugins.Info{
		execstage.Info(),
		cifarprepare.Info(),
		nputrain.Info(),
		npueval.Info(),
		npulaunch.Info(),
		ckptintegrate.Info(),
		ckptreshard.Info(),
	}
}

// Descriptors returns what each built-in stage declares (name, version,
// `with` schema, outputs), sorted by name so generated documents are stable.
func Descriptors(ctx context.Context) ([]plugins.Descriptor, error) {
	infos := Infos()
	slices.SortFunc(infos, func(a, b plugins.Info) int { return strings.Compare(a.Name, b.Name) })
	var out []plugins.Descriptor
	for _, info := range infos {
		d, err := info.New().Describe(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe built-in stage %s: %w", info.Name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// PipelineSchema returns the published JSON Schema of pipeline specs: the
// hand-written base with the `with` of every built-in stage typed by the
// stage's own declaration (what `mspipe schema` prints and
// schemas/pipeline.schema.json holds).
func PipelineSchema(ctx context.Context) ([]byte, error) {
	descs, err := Descriptors(ctx)
	if err != nil {
		return nil, err
	}
	stages := make([]schemas.StageInputs, 0, len(descs))
	for _, d := range descs {
		stages = append(stages, schemas.StageInputs{Name: d.Name, With: d.WithSchema})
	}
	return schemas.Compose(schemas.Base, stages)
}
