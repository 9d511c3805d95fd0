package nn

import (
	"hash/fnv"
	"math"
)

// initRNG is the generator behind every initial parameter value: SplitMix64
// seeded from the model seed and the parameter's name, so a parameter's
// initial value does not depend on which parameters come before it, and the
// same seed gives the same bits on every run.
type initRNG struct {
	state    uint64
	spare    float64
	hasSpare bool
}

func newInitRNG(seed uint64, name string) *initRNG {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &initRNG{state: seed ^ h.Sum64()}
}

func (r *initRNG) uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// float64 returns a uniform value in [0, 1).
func (r *initRNG) float64() float64 { return float64(r.uint64()>>11) / (1 << 53) }

// normal returns a standard normal value (Box–Muller).
func (r *initRNG) normal() float64 {
	if r.hasSpare {
		r.hasSpare = false
		return r.spare
	}
	u1 := 1 - r.float64() // (0, 1]
	u2 := r.float64()
	rad := math.Sqrt(-2 * math.Log(u1))
	r.spare, r.hasSpare = rad*math.Sin(2*math.Pi*u2), true
	return rad * math.Cos(2*math.Pi*u2)
}

// initKaimingNormalFanOut fills a convolution weight [out, in, kh, kw] from
// N(0, 2/(out·kh·kw)): He initialisation with mode fan_out and the ReLU gain,
// as MindSpore's ResNet builds its convolutions.
func initKaimingNormalFanOut(p *Param, seed uint64) {
	s := p.Shape()
	fanOut := s[0]
	for _, d := range s[2:] {
		fanOut *= d
	}
	std := math.Sqrt(2 / float64(max(1, fanOut)))
	r := newInitRNG(seed, p.Name)
	for i := range p.Value.Data() {
		p.Value.Data()[i] = float32(std * r.normal())
	}
}

// initKaimingUniformFanIn fills a Dense weight [out, in] from U(−b, b) with
// b = 1/√in: He uniform with a = √5, as MindSpore's ResNet builds end_point.
func initKaimingUniformFanIn(p *Param, seed uint64) {
	InitUniformFanIn(p, p.Shape()[1], seed)
}

// InitUniformFanIn fills p from U(−b, b) with b = 1/√fanIn, drawn from p's
// own stream (seed and name) as Dense weights are: for layers built outside
// this package whose weight keeps its fan-in on another axis (a MatMul
// weight [in, out]).
func InitUniformFanIn(p *Param, fanIn int, seed uint64) {
	bound := 1 / math.Sqrt(float64(max(1, fanIn)))
	r := newInitRNG(seed, p.Name)
	for i := range p.Value.Data() {
		p.Value.Data()[i] = float32(bound * (2*r.float64() - 1))
	}
}
