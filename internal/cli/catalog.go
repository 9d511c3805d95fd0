package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/spec"
	cifarprepare "github.com/mspipe/mspipe/stages/cifar/prepare"
	ckptintegrate "github.com/mspipe/mspipe/stages/ckpt/integrate"
	ckptreshard "github.com/mspipe/mspipe/stages/ckpt/reshard"
	npueval "github.com/mspipe/mspipe/stages/npu/eval"
	npulaunch "github.com/mspipe/mspipe/stages/npu/launch"
	nputrain "github.com/mspipe/mspipe/stages/npu/train"
)

// declaredStages are the built-in stages whose declaration ships with this
// build, whether or not their implementation has landed yet.
var declaredStages = [][]byte{
	cifarprepare.Descriptor,
	nputrain.Descriptor,
	npueval.Descriptor,
	npulaunch.Descriptor,
	ckptintegrate.Descriptor,
	ckptreshard.Descriptor,
}

// stageDescriptor is the JSON form of a stage declaration.
type stageDescriptor struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	With        json.RawMessage `json:"with"`
	Outputs     []struct {
		Name        string `json:"name"`
		Type        string `json:"type"`
		Description string `json:"description"`
	} `json:"outputs"`
}

func (d stageDescriptor) info() *spec.StageInfo {
	info := &spec.StageInfo{Name: d.Name}
	if len(d.With) > 0 {
		info.WithSchema = d.With
	}
	for _, o := range d.Outputs {
		info.Outputs = append(info.Outputs, spec.OutputDecl{Name: o.Name, Type: spec.Type(o.Type), Description: o.Description})
	}
	return info
}

// catalog answers spec.Catalog for the built-in stages and plugin binaries
// named by path, relative to the spec file's directory.
type catalog struct {
	specDir  string
	builtins map[string]*spec.StageInfo
}

func newCatalog(specDir string) (*catalog, error) {
	c := &catalog{specDir: specDir, builtins: map[string]*spec.StageInfo{}}
	for _, raw := range declaredStages {
		var d stageDescriptor
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("built-in stage declaration: %w", err)
		}
		c.builtins[d.Name] = d.info()
	}
	return c, nil
}

func (c *catalog) Names() []string {
	names := make([]string, 0, len(c.builtins))
	for n := range c.builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (c *catalog) Stage(uses string) (*spec.StageInfo, error) {
	if info, ok := c.builtins[uses]; ok {
		return info, nil
	}
	if strings.HasPrefix(uses, "./") || strings.HasPrefix(uses, "../") || filepath.IsAbs(uses) {
		path := uses
		if !filepath.IsAbs(path) {
			path = filepath.Join(c.specDir, path)
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("plugin binary %s not found", uses)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("plugin %s is not an executable file", uses)
		}
		return &spec.StageInfo{Name: uses}, nil
	}
	return nil, fmt.Errorf("unknown stage %q (built-in stages: %s)", uses, strings.Join(c.Names(), ", "))
}
