package cli

import (
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/spec"
)

// checkRankTableForSpec validates a rank table named by a spec's cluster
// with the same rules as `mspipe ranktable validate`, returning its
// problems positioned in the rank table file.
func checkRankTableForSpec(path string) (int, spec.ErrorList, error) {
	t, problems, err := ranktable.Load(path)
	if err != nil {
		return 0, nil, err
	}
	var out spec.ErrorList
	for _, p := range problems {
		sev := spec.SeverityError
		if p.Severity == ranktable.SeverityWarning {
			sev = spec.SeverityWarning
		}
		out = append(out, &spec.Error{
			Pos:      spec.Pos{File: p.File, Line: p.Pos.Line, Col: p.Pos.Col},
			Severity: sev,
			Msg:      p.Msg,
		})
	}
	n := 0
	if t != nil {
		n = t.RankSize()
	}
	return n, out, nil
}
