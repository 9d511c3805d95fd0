package cli

import (
	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/stages/builtin"
)

// builtinStages builds the registry of the stages served by the mspipe
// binary itself (`mspipe __stage NAME`) from the one list in stages/builtin.
func builtinStages() (*host.Registry, error) {
	reg := host.NewRegistry()
	for _, info := range builtin.Infos() {
		if err := reg.Register(info); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// declaredStages are built-in stages whose declaration ships with this
// build although their implementation has not landed yet: specs using them
// validate, and running them fails with catalog.ErrNotImplemented. None today.
var declaredStages [][]byte

// newStageEnv returns the catalog of every stage a spec in specDir can
// use: the built-ins, the declared ones and plugin binaries, which it starts
// to read what they declare. The exec stage's command runs through a shell.
func newStageEnv(specDir string) (*catalog.Catalog, error) {
	return newCatalog(specDir, catalog.ExecAll)
}

// uncheckedNotes say, by policy, how to have a plugin binary checked that
// validate did not start.
var uncheckedNotes = map[catalog.ExecPolicy]string{
	catalog.ExecPinned: "pin it with sha256: in the stage; validate --exec-plugins starts unpinned binaries",
	catalog.ExecNever:  "--exec-plugins=never",
}

// newCatalog is newStageEnv with the plugin binaries policy lets
// validation start.
func newCatalog(specDir string, policy catalog.ExecPolicy) (*catalog.Catalog, error) {
	reg, err := builtinStages()
	if err != nil {
		return nil, err
	}
	return catalog.New(catalog.Config{
		Resolver:      &host.Resolver{Builtins: reg, SpecDir: specDir, SearchPath: host.DefaultSearchPath()},
		Declarations:  declaredStages,
		ShellCommands: []string{builtin.ShellStage},
		Exec:          policy,
		UncheckedNote: uncheckedNotes[policy],
	})
}
