package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// strategyLayouts gives the layout of a set's tensors from a strategy
// file. An optimizer moment without a layout of its own
// (moments.fc.weight) takes its parameter's, as MindSpore's merge does.
type strategyLayouts struct{ file *parallel.StrategyFile }

func readLayouts(path string) (strategyLayouts, error) {
	f, err := parallel.ReadStrategies(path)
	if err != nil {
		return strategyLayouts{}, err
	}
	return strategyLayouts{f}, nil
}

// lookup returns the layout of a tensor by name.
func (s strategyLayouts) lookup(name string) (parallel.TensorLayout, bool) {
	if l, ok := s.file.Layouts[name]; ok {
		return l, true
	}
	if param, ok := strings.CutPrefix(name, "moments."); ok {
		l, ok := s.file.Layouts[param]
		return l, ok
	}
	return parallel.TensorLayout{}, false
}

// layout describes a tensor's layout and checks that the ranks' slices are
// the boxes it gives; nil for a tensor the file has no layout for
// (replicated).
func (s strategyLayouts) layout(name string, rankShapes [][]int64) *layoutInfo {
	l, ok := s.lookup(name)
	if !ok {
		return nil
	}
	info := &layoutInfo{DeviceMatrix: l.DeviceMatrix, TensorMap: l.TensorMap, ParamSplitShape: l.ParamSplitShape}
	if rankShapes[0] == nil {
		info.Err = "rank 0 does not hold the tensor"
		return info
	}
	whole, err := ckptset.WholeShape(l, rankShapes[0])
	if err != nil {
		info.Err = err.Error()
		return info
	}
	info.Shape = make([]int64, len(whole))
	for i, d := range whole {
		info.Shape[i] = int64(d)
	}
	boxes, err := l.Boxes(whole)
	switch {
	case err != nil:
		info.Err = err.Error()
	case len(boxes) != len(rankShapes):
		info.Err = fmt.Sprintf("the layout has %d devices, the set %d ranks", len(boxes), len(rankShapes))
	default:
		for r, b := range boxes {
			if !slices.Equal(toInt64s(b.Shape), rankShapes[r]) {
				info.Err = fmt.Sprintf("rank %d holds %s, the layout gives it %s", r, pyShape(rankShapes[r]), pyShape(toInt64s(b.Shape)))
				break
			}
		}
	}
	return info
}

func toInt64s(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}
