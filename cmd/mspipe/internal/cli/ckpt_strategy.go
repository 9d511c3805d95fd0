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
	// In a pipeline set (stages of the layout's devices) only the ranks of
	// the tensor's stage(s) hold it; the first of them gives the slice.
	first := slices.IndexFunc(rankShapes, func(s []int64) bool { return s != nil })
	if first < 0 {
		info.Err = "no rank holds the tensor"
		return info
	}
	whole, err := ckptset.WholeShape(l, rankShapes[first])
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
	case len(boxes)*len(s.file.Stages()) != len(rankShapes):
		info.Err = fmt.Sprintf("the layout has %d devices, the set %d ranks", len(boxes), len(rankShapes))
		if n := len(s.file.Stages()); n > 1 {
			info.Err = fmt.Sprintf("the layout has %d pipeline stages of %d devices, the set %d ranks", n, len(boxes), len(rankShapes))
		}
	default:
		stageDevices := len(boxes)
		for r, shape := range rankShapes {
			stageHolds := slices.ContainsFunc(rankShapes[r-r%stageDevices:r-r%stageDevices+stageDevices], func(s []int64) bool { return s != nil })
			if !stageHolds {
				continue // another pipeline stage's tensor
			}
			if want := toInt64s(boxes[r%stageDevices].Shape); !slices.Equal(want, shape) {
				held := "holds " + pyShape(shape)
				if shape == nil {
					held = "does not hold it"
				}
				info.Err = fmt.Sprintf("rank %d %s, the layout gives it %s", r, held, pyShape(want))
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
