package cli

import (
	"context"
	"fmt"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
	cifarprepare "github.com/mspipe/mspipe/stages/cifar/prepare"
	ckptintegrate "github.com/mspipe/mspipe/stages/ckpt/integrate"
	ckptreshard "github.com/mspipe/mspipe/stages/ckpt/reshard"
	execstage "github.com/mspipe/mspipe/stages/exec"
	npueval "github.com/mspipe/mspipe/stages/npu/eval"
	npulaunch "github.com/mspipe/mspipe/stages/npu/launch"
	nputrain "github.com/mspipe/mspipe/stages/npu/train"
)

// builtinStages builds the registry of the stages served by the mspipe
// binary itself (`mspipe __stage NAME`). This is the one list of built-ins:
// a new built-in stage adds its Info here.
func builtinStages() (*host.Registry, error) {
	reg := host.NewRegistry()
	for _, info := range []plugins.Info{
		execstage.Info(),
		cifarprepare.Info(),
		nputrain.Info(),
		npueval.Info(),
		npulaunch.Info(),
		ckptintegrate.Info(),
		ckptreshard.Info(),
	} {
		if err := reg.Register(info); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// declaredStages are built-in stages whose declaration ships with this
// build although their implementation has not landed yet: specs using them
// validate, and running them fails with host.ErrNotImplemented. None today.
var declaredStages [][]byte

// newStageEnv returns the catalog of every stage a spec in specDir can
// use: the built-ins, the declared ones and plugin binaries, which it starts
// to read what they declare. The exec stage's command runs through a shell.
func newStageEnv(specDir string) (*host.Catalog, error) {
	return newCatalog(specDir, host.ExecAll)
}

// uncheckedNotes say, by policy, how to have a plugin binary checked that
// validate did not start.
var uncheckedNotes = map[host.ExecPolicy]string{
	host.ExecPinned: "pin it with sha256: in the stage; validate --exec-plugins starts unpinned binaries",
	host.ExecNever:  "--exec-plugins=never",
}

// newCatalog is newStageEnv with the plugin binaries policy lets
// validation start.
func newCatalog(specDir string, policy host.ExecPolicy) (*host.Catalog, error) {
	reg, err := builtinStages()
	if err != nil {
		return nil, err
	}
	return host.NewCatalog(host.CatalogConfig{
		Resolver:      &host.Resolver{Builtins: reg, SpecDir: specDir, SearchPath: host.DefaultSearchPath()},
		Declarations:  declaredStages,
		ShellCommands: []string{execstage.Name},
		Exec:          policy,
		UncheckedNote: uncheckedNotes[policy],
	})
}

// BuiltinDescriptors returns what each built-in stage declares (name,
// version, `with` schema, outputs), by name: the spec reference
// (internal/tools/specdoc) is generated from it.
func BuiltinDescriptors(ctx context.Context) ([]plugins.Descriptor, error) {
	reg, err := builtinStages()
	if err != nil {
		return nil, err
	}
	var out []plugins.Descriptor
	for _, name := range reg.Names() {
		info, _ := reg.Lookup(name)
		d, err := info.New().Describe(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe built-in stage %s: %w", name, err)
		}
		out = append(out, d)
	}
	return out, nil
}
