package cli

import (
	"github.com/mspipe/mspipe/plugins"
	cifarprepare "github.com/mspipe/mspipe/stages/cifar/prepare"
	execstage "github.com/mspipe/mspipe/stages/exec"
	npueval "github.com/mspipe/mspipe/stages/npu/eval"
	npulaunch "github.com/mspipe/mspipe/stages/npu/launch"
	nputrain "github.com/mspipe/mspipe/stages/npu/train"
)

// builtinStages builds the registry of the stages served by the mspipe
// binary itself (`mspipe __stage NAME`). This is the one list of built-ins:
// a new built-in stage adds its Info here.
func builtinStages() (*plugins.Registry, error) {
	reg := plugins.NewRegistry()
	for _, info := range []plugins.Info{
		execstage.Info(),
		cifarprepare.Info(),
		nputrain.Info(),
		npueval.Info(),
		npulaunch.Info(),
	} {
		if err := reg.Register(info); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
