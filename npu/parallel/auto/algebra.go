package auto

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/npu/parallel"
)

// The search prices a redistribution for every pair of consecutive
// candidates: at 4,096 devices some 75,000 pairs of layouts for wide_net.
// Listing every rank's box and intersecting it with every distinct box of
// the other layout costs O(devices²) a pair; this file gets the same
// per-rank byte counts from the layouts' algebra instead.
//
// A layout cuts dimension k of a tensor into n_k slices, rank r holding
// slice (r / stride_k) mod n_k (a [cut]). When the strides and extents of
// both layouts' cuts and the server size form a chain of divisors
// 1 | b_1 | ... | devices, a rank is a tuple of independent digits (digit j
// has weight b_j and b_{j+1}/b_j values), each cut reads a run of
// consecutive digits, and the ranks of one server are those that share the
// digits of weight ≥ DevicesPerServer. Then, with T a rank's new box, F its
// old one and U the union of the old boxes of its server (a box: each cut
// reads its low, in-server digits as the low part of the slice index):
//
//	received(r)          = |T| − |T∩F|
//	from its server(r)   = |T∩U| − |T∩F|
//	from other servers(r) = |T| − |T∩U|
//
// since the old boxes partition the tensor. Each term is a product over
// dimensions of interval overlaps; dimensions whose cuts share no digit are
// independent, so the distinct (|T∩F|, |T∩U|) pairs of each group of
// linked dimensions are enumerated over that group's digits alone,
// memoised, and multiplied together. The cost depends on the cuts, not on
// the device count. Layouts off the chain (a split by 3 next to a split by
// 2 of the same dimension, say) fall back to a per-rank count against the
// distinct boxes of the rank's server, O(devices × DevicesPerServer).
// TestLoadsMatchBoxes checks both against [Machine.Redistribution] on
// random layouts.

// cut is how a layout divides one tensor dimension: into n slices, rank r
// holding slice (r / stride) mod n. A whole dimension is {1, 1}.
type cut struct{ stride, n int }

// cuts is a layout reduced to what decides every rank's box; two layouts
// with equal cuts give every rank the same box.
type cuts struct {
	devices int
	shape   []int
	dims    []cut
	key     string
	id      int // the pricer's number for key
}

func cutsOf(l parallel.Layout) (cuts, error) {
	if err := l.Validate(); err != nil {
		return cuts{}, err
	}
	c := cuts{devices: l.Devices(), shape: l.Shape, dims: make([]cut, len(l.Shape))}
	var key strings.Builder
	key.WriteString(strconv.Itoa(c.devices))
	for k, m := range l.TensorMap {
		c.dims[k] = cut{1, 1}
		if m >= 0 {
			axis := len(l.DeviceMatrix) - 1 - m
			if n := l.DeviceMatrix[axis]; n > 1 {
				stride := 1
				for _, d := range l.DeviceMatrix[axis+1:] {
					stride *= d
				}
				c.dims[k] = cut{stride, n}
			}
		}
		fmt.Fprintf(&key, ";%d:%d/%d", l.Shape[k], c.dims[k].stride, c.dims[k].n)
	}
	c.key = key.String()
	return c, nil
}

// interval is dimension k's slice [lo, hi) under cut c for slice index i.
func interval(size int, c cut, i int) (lo, hi int) {
	s := size / c.n
	return i * s, (i + 1) * s
}

func overlap1(alo, ahi, blo, bhi int) int64 {
	if lo, hi := max(alo, blo), min(ahi, bhi); hi > lo {
		return int64(hi - lo)
	}
	return 0
}

// load is what one rank receives in a redistribution, in elements: from
// ranks of its own server and from other servers.
type load struct{ intra, inter int64 }

// pair is (|T∩F|, |T∩U|) for one rank, or the product of such over some
// dimensions.
type pair struct{ own, server int64 }

// loads returns the distinct per-rank loads of redistributing a tensor
// from one layout to another (same shape and device count) on servers of
// dps devices. memo caches groups of linked dimensions across calls.
func loads(from, to cuts, dps int, memo map[string][]pair) []load {
	n := from.devices
	dps = min(dps, n)
	bps := []int{1, n, dps}
	for _, c := range [2]cuts{from, to} {
		for _, d := range c.dims {
			if d.n > 1 {
				bps = append(bps, d.stride, d.stride*d.n)
			}
		}
	}
	slices.Sort(bps)
	bps = slices.Compact(bps)
	for j := 1; j < len(bps); j++ {
		if bps[j]%bps[j-1] != 0 {
			return loadsByRank(from, to, dps)
		}
	}
	dims := len(from.shape)
	// Link dimensions whose cuts read a common digit.
	parent := make([]int, dims)
	for k := range parent {
		parent[k] = k
	}
	var root func(int) int
	root = func(k int) int {
		for parent[k] != k {
			k = parent[k]
		}
		return k
	}
	owner := func(c cuts, weight int) int {
		for k, d := range c.dims {
			if d.n > 1 && weight >= d.stride && weight < d.stride*d.n {
				return k
			}
		}
		return -1
	}
	for _, w := range bps[:len(bps)-1] {
		if f, t := owner(from, w), owner(to, w); f >= 0 && t >= 0 {
			parent[root(f)] = root(t)
		}
	}
	var total int64 = 1
	result := []pair{{1, 1}}
	done := make([]bool, dims)
	for k := range dims {
		total *= int64(from.shape[k] / to.dims[k].n)
		if done[k] {
			continue
		}
		var group []int
		for q := k; q < dims; q++ {
			if root(q) == root(k) {
				group = append(group, q)
				done[q] = true
			}
		}
		pairs := groupPairs(from, to, group, dps, bps, memo)
		next := make([]pair, 0, len(result)*len(pairs))
		for _, a := range result {
			for _, b := range pairs {
				next = addPair(next, pair{a.own * b.own, a.server * b.server})
			}
		}
		result = next
	}
	out := make([]load, 0, len(result))
	for _, p := range result {
		l := load{intra: p.server - p.own, inter: total - p.server}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

func addPair(ps []pair, p pair) []pair {
	if slices.Contains(ps, p) {
		return ps
	}
	return append(ps, p)
}

// groupPairs enumerates the digits read by the cuts of a group of linked
// dimensions and returns the distinct (|T∩F|, |T∩U|) products over them.
func groupPairs(from, to cuts, group []int, dps int, bps []int, memo map[string][]pair) []pair {
	// The digits the group's cuts read, with what each adds to the slice
	// index of the dimension it belongs to (position in group, or -1);
	// consecutive digits read alike are one digit.
	var digits []digit
	local := make([]int, len(group)) // in-server slices of the old cut
	for g := range local {
		local[g] = 1
	}
	last, lastLocal := -2, false
	for j := 0; j+1 < len(bps); j++ {
		w := bps[j]
		d := digit{size: bps[j+1] / w, fDim: -1, tDim: -1}
		for g, k := range group {
			if c := from.dims[k]; c.n > 1 && w >= c.stride && w < c.stride*c.n {
				d.fDim, d.fMul = g, w/c.stride
				if w < dps {
					local[g] *= d.size
				}
			}
			if c := to.dims[k]; c.n > 1 && w >= c.stride && w < c.stride*c.n {
				d.tDim, d.tMul = g, w/c.stride
			}
		}
		if d.fDim < 0 && d.tDim < 0 {
			continue
		}
		if n := len(digits); last == j-1 && lastLocal == (w < dps) && digits[n-1].fDim == d.fDim && digits[n-1].tDim == d.tDim {
			digits[n-1].size *= d.size
		} else {
			digits = append(digits, d)
		}
		last, lastLocal = j, w < dps
	}
	// Overlaps scale with the slices: dimension g is counted in units of
	// the greatest common divisor of its old and new slice sizes, which
	// makes groups that differ only in scale share the memo.
	key := make([]byte, 0, 64)
	unit := make([]int, len(group))
	for g, k := range group {
		f, t := from.shape[k]/from.dims[k].n, from.shape[k]/to.dims[k].n
		unit[g] = gcd(f, t)
		key = appendInts(key, f/unit[g], t/unit[g], local[g])
	}
	for _, d := range digits {
		key = appendInts(key, d.size, d.fDim, d.fMul, d.tDim, d.tMul)
	}
	ps, ok := memo[string(key)]
	if !ok {
		ps = walkPairs(from, to, group, digits, local, unit)
		memo[string(key)] = ps
	}
	scale := int64(1)
	for _, u := range unit {
		scale *= int64(u)
	}
	out := make([]pair, len(ps))
	for i, p := range ps {
		out[i] = pair{p.own * scale, p.server * scale}
	}
	return out
}

func appendInts(b []byte, vs ...int) []byte {
	for _, v := range vs {
		b = strconv.AppendInt(b, int64(v), 10)
		b = append(b, ',')
	}
	return append(b, ';')
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// walkPairs returns the distinct (|T∩F|, |T∩U|) products of a group over
// its digits, each dimension counted in its unit.
func walkPairs(from, to cuts, group []int, digits []digit, local, unit []int) []pair {
	// Prime digits: the walk fixes the high part of a long digit first and
	// stops as soon as that settles the overlaps.
	var primes []digit
	for _, d := range digits {
		size, step := d.size, 1
		for p := 2; size > 1; p++ {
			if p*p > size {
				p = size // size is prime
			}
			for size%p == 0 {
				primes = append(primes, digit{size: p, fDim: d.fDim, fMul: d.fMul * step, tDim: d.tDim, tMul: d.tMul * step})
				size /= p
				step *= p
			}
		}
	}
	digits = primes
	w := &walk{digits: digits, dims: make([]walkDim, len(group))}
	for g, k := range group {
		size, fc, tc := from.shape[k]/unit[g], from.dims[k], to.dims[k]
		w.dims[g] = walkDim{f: size / fc.n, t: size / tc.n, local: local[g],
			restF: make([]int, len(digits)+1), restT: make([]int, len(digits)+1)}
	}
	// Digits that move a slice furthest first, so that the bounds of the
	// walk close early.
	steps := make([]int, len(w.digits))
	order := make([]int, len(w.digits))
	for i, d := range w.digits {
		steps[i], order[i] = w.step(d), i
	}
	slices.SortStableFunc(order, func(a, b int) int { return steps[b] - steps[a] })
	sorted := make([]digit, len(order))
	for i, j := range order {
		sorted[i] = w.digits[j]
	}
	w.digits = sorted
	for l := len(w.digits) - 1; l >= 0; l-- {
		d := w.digits[l]
		for g := range w.dims {
			w.dims[g].restF[l], w.dims[g].restT[l] = w.dims[g].restF[l+1], w.dims[g].restT[l+1]
		}
		if d.fDim >= 0 {
			w.dims[d.fDim].restF[l] += (d.size - 1) * d.fMul
		}
		if d.tDim >= 0 {
			w.dims[d.tDim].restT[l] += (d.size - 1) * d.tMul
		}
	}
	w.visit(0)
	return w.out
}

// digit is one digit of the ranks a group's cuts read: its number of
// values and what one step of it adds to the slice index of the old cut
// (fDim, position in the group, or -1) and of the new cut (tDim).
type digit struct {
	size, fDim, fMul, tDim, tMul int
}

// walkDim is one dimension of a group: the old and new slice sizes, the
// old slices a server holds, and per walk level the most the unfixed
// digits can add to the old and new slice index.
type walkDim struct {
	f, t, local  int
	restF, restT []int
	fi, ti       int // slice indices from the fixed digits
}

// walk visits the digit values of a group depth first and collects the
// distinct (|T∩F|, |T∩U|) products. A branch ends as soon as the bounds
// settle its outcome: some dimension's new slice cannot meet its server's
// old slices (the product is 0), or every dimension's overlaps are the
// same for all values of the remaining digits.
type walk struct {
	digits []digit
	dims   []walkDim
	out    []pair
}

func (w *walk) step(d digit) int {
	s := 0
	if d.fDim >= 0 {
		s = d.fMul * w.dims[d.fDim].f
	}
	if d.tDim >= 0 {
		s = max(s, d.tMul*w.dims[d.tDim].t)
	}
	return s
}

// visit adds the distinct products of the subtree below level, the digits
// above it fixed, to w.out.
func (w *walk) visit(level int) {
	p, settled := pair{1, 1}, true
	for g := range w.dims {
		d := &w.dims[g]
		imin, imax := d.fi, d.fi+d.restF[level]
		jmin, jmax := d.ti, d.ti+d.restT[level]
		tlo, thi := jmin*d.t, (jmax+1)*d.t
		ulo, uhi := (imin-imin%d.local)*d.f, (imax-imax%d.local+d.local)*d.f
		if thi <= ulo || uhi <= tlo {
			w.out = addPair(w.out, pair{0, 0})
			return
		}
		// Each overlap is settled when the bounds fix it for every value
		// of the remaining digits.
		flo, fhi := imin*d.f, (imax+1)*d.f
		tFixed, fFixed := jmin == jmax, imin == imax
		uFixed := imin-imin%d.local == imax-imax%d.local
		switch {
		case thi <= flo || fhi <= tlo:
			p.own = 0
		case fFixed && tFixed:
			p.own *= overlap1(tlo, thi, flo, fhi)
		case fFixed && flo <= tlo && thi <= fhi:
			p.own *= int64(d.t) // every new slice lies in the old one
		case tFixed && tlo <= flo && fhi <= thi:
			p.own *= int64(d.f) // the new slice holds every old one
		default:
			settled = false
		}
		switch {
		case uFixed && tFixed:
			p.server *= overlap1(tlo, thi, ulo, uhi)
		case uFixed && ulo <= tlo && thi <= uhi:
			p.server *= int64(d.t)
		case tFixed && tlo <= ulo && uhi <= thi:
			p.server *= int64(d.local * d.f)
		default:
			settled = false
		}
	}
	if settled {
		w.out = addPair(w.out, p)
		return
	}
	d := w.digits[level]
	for v := range d.size {
		if d.fDim >= 0 {
			w.dims[d.fDim].fi += v * d.fMul
		}
		if d.tDim >= 0 {
			w.dims[d.tDim].ti += v * d.tMul
		}
		w.visit(level + 1)
		if d.fDim >= 0 {
			w.dims[d.fDim].fi -= v * d.fMul
		}
		if d.tDim >= 0 {
			w.dims[d.tDim].ti -= v * d.tMul
		}
	}
}

// loadsByRank counts, rank by rank, what each receives: its new box less
// its old one, split by whether a rank of its own server holds the part
// (the distinct old boxes of the server's ranks, which are disjoint).
func loadsByRank(from, to cuts, dps int) []load {
	n := from.devices
	dims := len(from.shape)
	box := func(c cuts, r int, lo, hi []int) {
		for k, d := range c.dims {
			lo[k], hi[k] = interval(c.shape[k], d, r/d.stride%d.n)
		}
	}
	vol := func(alo, ahi, blo, bhi []int) int64 {
		v := int64(1)
		for k := range alo {
			v *= overlap1(alo[k], ahi[k], blo[k], bhi[k])
		}
		return v
	}
	tlo, thi := make([]int, dims), make([]int, dims)
	flo, fhi := make([]int, dims), make([]int, dims)
	var out []load
	type part struct{ lo, hi []int }
	for s := 0; s < n; s += dps {
		var parts []part
		for q := s; q < min(s+dps, n); q++ {
			lo, hi := make([]int, dims), make([]int, dims)
			box(from, q, lo, hi)
			if !slices.ContainsFunc(parts, func(p part) bool { return slices.Equal(p.lo, lo) }) {
				parts = append(parts, part{lo, hi})
			}
		}
		for r := s; r < min(s+dps, n); r++ {
			box(to, r, tlo, thi)
			box(from, r, flo, fhi)
			all, own := vol(tlo, thi, tlo, thi), vol(tlo, thi, flo, fhi)
			server := int64(0)
			for _, p := range parts {
				server += vol(tlo, thi, p.lo, p.hi)
			}
			if l := (load{intra: server - own, inter: all - server}); !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// cost prices loads on machine m as [Transfer.Seconds] and
// [Transfer.MaxBytes] do, and gives the most any rank receives over each
// link.
func (m Machine) cost(ls []load) (seconds float64, maxBytes, maxIntra, maxInter int64) {
	var intra, inter bool
	within, between := m.link(Redistribution, false), m.link(Redistribution, true)
	for _, l := range ls {
		bi, be := l.intra*BytesPerElement, l.inter*BytesPerElement
		seconds = max(seconds, float64(bi)/within.Bandwidth+float64(be)/between.Bandwidth)
		maxBytes = max(maxBytes, bi+be)
		maxIntra, maxInter = max(maxIntra, bi), max(maxInter, be)
		intra = intra || bi > 0
		inter = inter || be > 0
	}
	switch {
	case inter:
		return seconds + between.Latency.Seconds(), maxBytes, maxIntra, maxInter
	case intra:
		return seconds + within.Latency.Seconds(), maxBytes, maxIntra, maxInter
	}
	return 0, 0, 0, 0
}

// acrossServers reports whether some group of ranks that differ only in
// their coordinates on axes of device matrix dm spans servers of dps
// devices. When each axis's run of ranks fits evenly in a server, no group
// leaves its server; when an axis's stride or extent is a multiple of the
// server size, rank 0's group reaches another server; otherwise the groups
// are listed.
func acrossServers(dm, axes []int, dps int) (bool, error) {
	l := parallel.Layout{DeviceMatrix: dm}
	n := l.Devices()
	if dps >= n {
		return false, nil
	}
	regular := true
	for _, a := range axes {
		if dm[a] == 1 {
			continue
		}
		stride := 1
		for _, d := range dm[a+1:] {
			stride *= d
		}
		switch extent := stride * dm[a]; {
		case dps%extent == 0:
		case stride%dps == 0 || dps%stride == 0 && extent%dps == 0:
			return true, nil
		default:
			regular = false
		}
	}
	if regular {
		return false, nil
	}
	for r := range n {
		members, err := l.Group(r, axes)
		if err != nil {
			return false, err
		}
		for _, q := range members {
			if q/dps != r/dps {
				return true, nil
			}
		}
	}
	return false, nil
}
