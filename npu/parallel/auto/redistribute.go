package auto

import (
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/parallel"
)

// Transfer is what a redistribution moves: per rank, the bytes it must
// receive from a rank on its own server (Intra) and from another server
// (Inter).
type Transfer struct {
	Intra, Inter []int64
}

// Redistribution returns what each rank must receive to go from holding
// its slice of a tensor laid out as from to holding its slice laid out as
// to: the parts of its new box outside its old one, each fetched from a
// rank of its own server when one holds it. AllGather (split to whole),
// split (whole to split, nothing received) and AllToAll (one dimension's
// split moved to another) are all cases of it.
func (m Machine) Redistribution(from, to parallel.Layout) (Transfer, error) {
	if !slices.Equal(from.Shape, to.Shape) {
		return Transfer{}, fmt.Errorf("%w: redistribute a tensor of shape %v to shape %v", ErrGraph, from.Shape, to.Shape)
	}
	n := from.Devices()
	if to.Devices() != n {
		return Transfer{}, fmt.Errorf("%w: redistribute from %d devices to %d", ErrGraph, n, to.Devices())
	}
	if err := from.Validate(); err != nil {
		return Transfer{}, err
	}
	if err := to.Validate(); err != nil {
		return Transfer{}, err
	}
	// The distinct boxes of from partition the tensor (splits are even);
	// each is held by every rank that repeats it.
	type held struct {
		box     parallel.Box
		servers map[int]bool
	}
	var parts []*held
	index := map[string]*held{}
	own := make([]*held, n)
	for r := range n {
		b, err := from.Box(r)
		if err != nil {
			return Transfer{}, err
		}
		key := fmt.Sprint(b.Offset)
		h, ok := index[key]
		if !ok {
			h = &held{box: b, servers: map[int]bool{}}
			index[key] = h
			parts = append(parts, h)
		}
		h.servers[m.server(r)] = true
		own[r] = h
	}
	t := Transfer{Intra: make([]int64, n), Inter: make([]int64, n)}
	for r := range n {
		need, err := to.Box(r)
		if err != nil {
			return Transfer{}, err
		}
		for _, h := range parts {
			if h == own[r] {
				continue
			}
			common, ok := need.Intersect(h.box)
			if !ok {
				continue
			}
			bytes := elements(common.Shape) * BytesPerElement
			if h.servers[m.server(r)] {
				t.Intra[r] += bytes
			} else {
				t.Inter[r] += bytes
			}
		}
	}
	return t, nil
}

// Seconds is the time of the transfer: the slowest rank's receiving time
// plus one latency of the slowest link used (nothing when no rank
// receives anything).
func (t Transfer) Seconds(m Machine) float64 {
	worst := 0.0
	var intra, inter bool
	for r := range t.Intra {
		s := float64(t.Intra[r])/m.IntraServer.Bandwidth + float64(t.Inter[r])/m.InterServer.Bandwidth
		worst = max(worst, s)
		intra = intra || t.Intra[r] > 0
		inter = inter || t.Inter[r] > 0
	}
	switch {
	case inter:
		return worst + m.InterServer.Latency.Seconds()
	case intra:
		return worst + m.IntraServer.Latency.Seconds()
	}
	return 0
}

// MaxBytes is the most bytes one rank receives.
func (t Transfer) MaxBytes() int64 {
	var most int64
	for r := range t.Intra {
		most = max(most, t.Intra[r]+t.Inter[r])
	}
	return most
}

func elements(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}
