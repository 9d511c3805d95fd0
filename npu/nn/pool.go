package nn

import (
	"fmt"
	"math"

	"github.com/mspipe/mspipe/npu/tensor"
)

// MaxPool2d takes the maximum over Kernel×Kernel windows of each channel.
// Padding positions never win (they count as −∞), as in MindSpore.
type MaxPool2d struct {
	name           string
	kernel, stride int
	pad            tensor.Padding
	dev            *Device
	geom           tensor.ConvGeom
	y, dx          *tensor.Tensor
	x              *tensor.Tensor
	argmax         []int32 // per output: index of the winning input in its plane
	job            poolJob
}

// NewMaxPool2d returns a max pool; MindSpore's ResNet uses kernel 3, stride
// 2, pad mode "same".
func NewMaxPool2d(name string, kernel, stride int, pad tensor.Padding, dev *Device) (*MaxPool2d, error) {
	if kernel <= 0 || stride <= 0 {
		return nil, fmt.Errorf("maxpool %s: kernel %d, stride %d must be positive: %w", name, kernel, stride, ErrConfig)
	}
	if err := pad.Validate(); err != nil {
		return nil, fmt.Errorf("maxpool %s: %w", name, err)
	}
	if pad.Mode == tensor.PadExplicit && max(pad.Top, pad.Bottom, pad.Left, pad.Right) >= kernel {
		// A window entirely in the padding would have no input to pick.
		return nil, fmt.Errorf("maxpool %s: padding %d,%d,%d,%d not smaller than kernel %d: %w",
			name, pad.Top, pad.Bottom, pad.Left, pad.Right, kernel, ErrConfig)
	}
	return &MaxPool2d{name: name, kernel: kernel, stride: stride, pad: pad, dev: orSerial(dev)}, nil
}

// Params returns nil.
func (m *MaxPool2d) Params() []*Param { return nil }

// Forward pools x, an [N C H W] batch.
func (m *MaxPool2d) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if x.Rank() != 4 || x.Dim(0) < 1 || x.Dim(1) < 1 {
		return nil, fmt.Errorf("maxpool %s: input %v, want [N C H W]: %w", m.name, x.Shape(), tensor.ErrShape)
	}
	n, c := x.Dim(0), x.Dim(1)
	g, err := tensor.NewConvGeom(1, x.Dim(2), x.Dim(3), m.kernel, m.kernel, m.stride, m.stride, m.pad)
	if err != nil {
		return nil, fmt.Errorf("maxpool %s: input %v: %w", m.name, x.Shape(), err)
	}
	m.geom = g
	if m.y, err = m.dev.ensure(m.name, "output", m.y, n, c, g.OutH, g.OutW); err != nil {
		return nil, fmt.Errorf("maxpool %s output: %w", m.name, err)
	}
	if m.dx, err = m.dev.ensure(m.name, "input gradient", m.dx, x.Shape()...); err != nil {
		return nil, fmt.Errorf("maxpool %s input gradient: %w", m.name, err)
	}
	if len(m.argmax) != m.y.Len() {
		m.argmax = make([]int32, m.y.Len())
	}
	m.x = x
	m.job = poolJob{m: m, forward: true}
	m.dev.workers.For(n*c, 0, &m.job)
	m.job = poolJob{}
	return m.y, nil
}

// Backward routes each output gradient to the input that won its window.
func (m *MaxPool2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := checkGrad("maxpool", m.name, m.y, dy); err != nil {
		return nil, err
	}
	m.job = poolJob{m: m, dy: dy.Data()}
	m.dev.workers.For(m.x.Dim(0)*m.x.Dim(1), 0, &m.job)
	m.job = poolJob{}
	return m.dx, nil
}

// poolJob handles planes (n, c) lo..hi-1.
type poolJob struct {
	m       *MaxPool2d
	dy      []float32
	forward bool
}

func (j *poolJob) Range(lo, hi int) {
	g := j.m.geom
	in, out := g.H*g.W, g.OutH*g.OutW
	for pl := lo; pl < hi; pl++ {
		if !j.forward {
			dx := j.m.dx.Data()[pl*in : (pl+1)*in]
			clear(dx)
			dy := j.dy[pl*out : (pl+1)*out]
			for o, idx := range j.m.argmax[pl*out : (pl+1)*out] {
				dx[idx] += dy[o]
			}
			continue
		}
		x := j.m.x.Data()[pl*in : (pl+1)*in]
		y := j.m.y.Data()[pl*out : (pl+1)*out]
		arg := j.m.argmax[pl*out : (pl+1)*out]
		for oh := 0; oh < g.OutH; oh++ {
			h0 := oh*g.StrideH - g.PadTop
			for ow := 0; ow < g.OutW; ow++ {
				w0 := ow*g.StrideW - g.PadLeft
				best, bestIdx := float32(math.Inf(-1)), -1
				for ih := max(h0, 0); ih < min(h0+g.KH, g.H); ih++ {
					for iw := max(w0, 0); iw < min(w0+g.KW, g.W); iw++ {
						if v := x[ih*g.W+iw]; v > best || bestIdx < 0 {
							best, bestIdx = v, ih*g.W+iw
						}
					}
				}
				y[oh*g.OutW+ow], arg[oh*g.OutW+ow] = best, int32(bestIdx)
			}
		}
	}
}

// GlobalAvgPool averages each channel over H×W: [N C H W] → [N C 1 1], as
// MindSpore's ResNet does with ReduceMean(keep_dims=True) over axes (2, 3).
type GlobalAvgPool struct {
	name  string
	y, dx *tensor.Tensor
	plane int
}

// NewGlobalAvgPool returns a global average pool.
func NewGlobalAvgPool(name string) *GlobalAvgPool { return &GlobalAvgPool{name: name} }

// Params returns nil.
func (p *GlobalAvgPool) Params() []*Param { return nil }

// Forward averages x over its last two axes.
func (p *GlobalAvgPool) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if x.Rank() != 4 || x.Len() == 0 {
		return nil, fmt.Errorf("avgpool %s: input %v, want [N C H W]: %w", p.name, x.Shape(), tensor.ErrShape)
	}
	var err error
	if p.y, err = ensure(p.y, x.Dim(0), x.Dim(1), 1, 1); err != nil {
		return nil, fmt.Errorf("avgpool %s output: %w", p.name, err)
	}
	if p.dx, err = ensure(p.dx, x.Shape()...); err != nil {
		return nil, fmt.Errorf("avgpool %s input gradient: %w", p.name, err)
	}
	p.plane = x.Dim(2) * x.Dim(3)
	xd, y := x.Data(), p.y.Data()
	for i := range y {
		var s float64
		for _, v := range xd[i*p.plane : (i+1)*p.plane] {
			s += float64(v)
		}
		y[i] = float32(s / float64(p.plane))
	}
	return p.y, nil
}

// Backward spreads each gradient evenly over its plane.
func (p *GlobalAvgPool) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := checkGrad("avgpool", p.name, p.y, dy); err != nil {
		return nil, err
	}
	dx := p.dx.Data()
	inv := 1 / float32(p.plane)
	for i, g := range dy.Data() {
		v := g * inv
		for q := range dx[i*p.plane : (i+1)*p.plane] {
			dx[i*p.plane+q] = v
		}
	}
	return p.dx, nil
}

// Flatten reshapes [N, d1, d2, ...] to [N, d1·d2·...] without copying.
type Flatten struct {
	name  string
	y, dx *tensor.Tensor
	in    []int
}

// NewFlatten returns a Flatten.
func NewFlatten(name string) *Flatten { return &Flatten{name: name} }

// Params returns nil.
func (f *Flatten) Params() []*Param { return nil }

// Forward returns a [N, rest] view of x.
func (f *Flatten) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if x.Rank() < 1 || x.Dim(0) < 1 {
		return nil, fmt.Errorf("flatten %s: input %v has no batch axis: %w", f.name, x.Shape(), tensor.ErrShape)
	}
	n := x.Dim(0)
	var err error
	if f.y, err = view(f.y, x.Data(), n, x.Len()/n); err != nil {
		return nil, fmt.Errorf("flatten %s: %w", f.name, err)
	}
	f.in = append(f.in[:0], x.Shape()...)
	return f.y, nil
}

// Backward returns dy viewed with the input's shape.
func (f *Flatten) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := checkGrad("flatten", f.name, f.y, dy); err != nil {
		return nil, err
	}
	var err error
	if f.dx, err = view(f.dx, dy.Data(), f.in...); err != nil {
		return nil, fmt.Errorf("flatten %s: %w", f.name, err)
	}
	return f.dx, nil
}

// view returns a tensor of the given shape over data, reusing t when it
// already is exactly that view.
func view(t *tensor.Tensor, data []float32, shape ...int) (*tensor.Tensor, error) {
	if t != nil && t.HasShape(shape...) && len(data) > 0 && t.Len() == len(data) && &t.Data()[0] == &data[0] {
		return t, nil
	}
	return tensor.FromSlice(data, shape...)
}
