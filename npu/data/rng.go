package data

import "math/bits"

// rng is SplitMix64: tiny, fast, and fully specified here, so that a seed
// gives the same stream on every Go version and platform (generated files and
// augmentations must be byte-identical forever, which math/rand does not
// promise).
type rng struct{ state uint64 }

const golden64 = 0x9e3779b97f4a7c15

func newRNG(seed uint64) rng { return rng{state: seed} }

func (r *rng) next() uint64 {
	r.state += golden64
	return mix64(r.state)
}

// mix64 is SplitMix64's output function, a bijective 64-bit finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a uniform integer in [0, n) for n > 0, without modulo bias
// (multiply-shift with rejection of the short range).
func (r *rng) intn(n int) int {
	bound := uint64(n)
	hi, lo := bits.Mul64(r.next(), bound)
	if lo < bound {
		threshold := -bound % bound
		for lo < threshold {
			hi, lo = bits.Mul64(r.next(), bound)
		}
	}
	return int(hi)
}

// float returns a uniform float64 in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// uniform returns a uniform float64 in [lo, hi).
func (r *rng) uniform(lo, hi float64) float64 { return lo + (hi-lo)*r.float() }

// Stream tags keep the random streams of different consumers of one base
// seed independent of each other.
const (
	tagSampler uint64 = iota + 1
	tagShuffle
	tagAugment
	tagSynthRecord
	tagSynthLabels
)

// deriveSeed hashes a base seed with a tag and two coordinates (for example
// an epoch and a sample position) into a new seed. Derived seeds depend only
// on their inputs, never on call order, so any epoch or sample can be
// reproduced on its own (resume, prefetch on another goroutine).
func deriveSeed(base, tag, a, b uint64) uint64 {
	h := mix64(base + golden64)
	h = mix64(h ^ (tag * golden64))
	h = mix64(h ^ (a + 0x632be59bd9b4e019))
	h = mix64(h ^ (b + 0x8cb92ba72f3d8dd7))
	return h
}
