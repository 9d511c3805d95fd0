package parallel

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	straspb "github.com/mspipe/mspipe/npu/parallel/proto"
)

// decodeStrategyProto decodes MindSpore's protobuf form. Required fields
// are checked here rather than by protobuf, so that the error names the
// operator or parameter; the two optimizer sharding fields may be absent
// (MindSpore releases before the parallel optimizer did not write them) and
// then read as 0.
func decodeStrategyProto(data []byte) (*StrategyFile, error) {
	var m straspb.ParallelStrategyMap
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: not a protobuf ParallelStrategyMap: %v", ErrStrategyFile, err)
	}
	if err := unknownFields(&m); err != nil {
		return nil, err
	}
	if m.CurrentStage == nil {
		return nil, fmt.Errorf("%w: current_stage missing", ErrStrategyFile)
	}
	f := &StrategyFile{CurrentStage: int(m.GetCurrentStage()), Operators: map[string][][]int{}, Layouts: map[string]TensorLayout{}}
	stages := map[string]int{}
	for i, item := range m.GetParallelStrategyItem() {
		name := item.GetNodeName()
		where := fmt.Sprintf("parallel_strategy_item %d (operator %q)", i, name)
		if err := unknownFields(item); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if item.NodeName == nil || name == "" {
			return nil, fmt.Errorf("%w: %s: node_name missing or empty", ErrStrategyFile, where)
		}
		if _, dup := f.Operators[name]; dup {
			return nil, fmt.Errorf("%w: operator %s appears twice", ErrStrategyFile, name)
		}
		ss := item.GetParallelStrategys()
		if ss == nil || ss.Stage == nil {
			return nil, fmt.Errorf("%w: operator %s: parallel_strategys or its stage missing", ErrStrategyFile, name)
		}
		if err := unknownFields(ss); err != nil {
			return nil, fmt.Errorf("operator %s: %w", name, err)
		}
		inputs := make([][]int, 0, len(ss.GetParallelStrategy()))
		for _, s := range ss.GetParallelStrategy() {
			if err := unknownFields(s); err != nil {
				return nil, fmt.Errorf("operator %s: %w", name, err)
			}
			inputs = append(inputs, uintsToInts(s.GetDim()))
		}
		f.Operators[name] = inputs
		stages[name] = int(ss.GetStage())
	}
	f.setOperatorStages(stages)
	for i, item := range m.GetParallelLayoutItem() {
		name := item.GetParamName()
		if item.ParamName == nil || name == "" {
			return nil, fmt.Errorf("%w: parallel_layout_item %d: param_name missing or empty", ErrStrategyFile, i)
		}
		if _, dup := f.Layouts[name]; dup {
			return nil, fmt.Errorf("%w: parameter %s has two layouts", ErrStrategyFile, name)
		}
		l, err := layoutFromProto(item)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", name, err)
		}
		f.Layouts[name] = l
	}
	return f, nil
}

func layoutFromProto(item *straspb.ParallelLayoutItem) (TensorLayout, error) {
	if err := unknownFields(item); err != nil {
		return TensorLayout{}, err
	}
	p := item.GetParallelLayouts()
	if p == nil {
		return TensorLayout{}, fmt.Errorf("%w: parallel_layouts missing", ErrStrategyFile)
	}
	if err := unknownFields(p); err != nil {
		return TensorLayout{}, err
	}
	if p.Field == nil {
		return TensorLayout{}, fmt.Errorf("%w: field missing", ErrStrategyFile)
	}
	// MindSpore writes exactly one of each list message; two would leave it
	// unclear which one holds.
	if len(p.GetDevMatrix()) != 1 || len(p.GetTensorMap()) != 1 || len(p.GetParamSplitShape()) > 1 || len(p.GetIndicesOffset()) > 1 {
		return TensorLayout{}, fmt.Errorf("%w: %d dev_matrix, %d tensor_map, %d param_split_shape, %d indices_offset entries; want one, one, at most one, at most one",
			ErrStrategyFile, len(p.GetDevMatrix()), len(p.GetTensorMap()), len(p.GetParamSplitShape()), len(p.GetIndicesOffset()))
	}
	l := TensorLayout{
		DeviceMatrix:       uintsToInts(p.GetDevMatrix()[0].GetDim()),
		Field:              int(p.GetField()),
		OptWeightShardStep: int(p.GetOptWeightShardStep()),
		OptWeightShardSize: int(p.GetOptWeightShardSize()),
	}
	tm := p.GetTensorMap()[0]
	if err := unknownFields(p.GetDevMatrix()[0]); err != nil {
		return TensorLayout{}, err
	}
	if err := unknownFields(tm); err != nil {
		return TensorLayout{}, err
	}
	for _, v := range tm.GetDim() {
		l.TensorMap = append(l.TensorMap, int(v))
	}
	var err error
	if len(p.GetParamSplitShape()) == 1 {
		if err := unknownFields(p.GetParamSplitShape()[0]); err != nil {
			return TensorLayout{}, err
		}
		if l.ParamSplitShape, err = int64sToInts("param_split_shape", p.GetParamSplitShape()[0].GetDim()); err != nil {
			return TensorLayout{}, err
		}
	}
	if len(p.GetIndicesOffset()) == 1 {
		if err := unknownFields(p.GetIndicesOffset()[0]); err != nil {
			return TensorLayout{}, err
		}
		if l.IndicesOffset, err = int64sToInts("indices_offset", p.GetIndicesOffset()[0].GetDim()); err != nil {
			return TensorLayout{}, err
		}
	}
	return l, nil
}

// encodeStrategyProto writes f (already validated) the way MindSpore does:
// items in name order, every layout with one dev_matrix, one tensor_map and
// one (possibly empty) param_split_shape and indices_offset.
func encodeStrategyProto(f *StrategyFile) ([]byte, error) {
	m := &straspb.ParallelStrategyMap{CurrentStage: proto.Uint32(uint32(f.CurrentStage))}
	for _, op := range slices.Sorted(maps.Keys(f.Operators)) {
		ss := &straspb.ParallelStrategys{Stage: proto.Uint32(uint32(f.OperatorStage(op)))}
		for _, shard := range f.Operators[op] {
			s := &straspb.ParallelStrategy{}
			for _, d := range shard {
				s.Dim = append(s.Dim, uint32(d))
			}
			ss.ParallelStrategy = append(ss.ParallelStrategy, s)
		}
		m.ParallelStrategyItem = append(m.ParallelStrategyItem, &straspb.ParallelStrategyItem{NodeName: proto.String(op), ParallelStrategys: ss})
	}
	for _, name := range slices.Sorted(maps.Keys(f.Layouts)) {
		l := f.Layouts[name]
		p := &straspb.ParallelLayouts{
			DevMatrix:          []*straspb.DevMatrix{{}},
			TensorMap:          []*straspb.TensorMap{{}},
			ParamSplitShape:    []*straspb.ParamSplitShape{{}},
			IndicesOffset:      []*straspb.IndicesOffset{{}},
			Field:              proto.Int32(int32(l.Field)),
			OptWeightShardStep: proto.Int32(int32(l.OptWeightShardStep)),
			OptWeightShardSize: proto.Int32(int32(l.OptWeightShardSize)),
		}
		for _, d := range l.DeviceMatrix {
			p.DevMatrix[0].Dim = append(p.DevMatrix[0].Dim, uint32(d))
		}
		for _, m := range l.TensorMap {
			p.TensorMap[0].Dim = append(p.TensorMap[0].Dim, int32(m))
		}
		for j := range l.ParamSplitShape {
			p.ParamSplitShape[0].Dim = append(p.ParamSplitShape[0].Dim, int64(l.ParamSplitShape[j]))
			p.IndicesOffset[0].Dim = append(p.IndicesOffset[0].Dim, int64(l.IndicesOffset[j]))
		}
		m.ParallelLayoutItem = append(m.ParallelLayoutItem, &straspb.ParallelLayoutItem{ParamName: proto.String(name), ParallelLayouts: p})
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode strategy protobuf: %w", err)
	}
	return data, nil
}

// unknownFields refuses a message carrying fields the schema does not know:
// a file from a newer MindSpore with layout information mspipe would drop,
// or not a strategy file at all.
func unknownFields(m proto.Message) error {
	raw := m.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 {
		return fmt.Errorf("%w: %s: undecodable unknown field", ErrStrategyFile, m.ProtoReflect().Descriptor().Name())
	}
	return fmt.Errorf("%w: %s has unknown field %d (wire type %d)", ErrStrategyFile, m.ProtoReflect().Descriptor().Name(), num, typ)
}

func uintsToInts(v []uint32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// int64sToInts converts, refusing values an int cannot hold (32-bit
// platforms) and values beyond maxDimSize.
func int64sToInts(what string, v []int64) ([]int, error) {
	if len(v) == 0 {
		return nil, nil
	}
	out := make([]int, len(v))
	for i, x := range v {
		if x < -maxDimSize || x > maxDimSize || x < math.MinInt || x > math.MaxInt {
			return nil, fmt.Errorf("%w: %s %v: entry %d is out of range", ErrLayout, what, v, i)
		}
		out[i] = int(x)
	}
	return out, nil
}
