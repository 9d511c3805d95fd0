package auto

import (
	"fmt"
	"slices"
	"strings"

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
	if from.Devices() != to.Devices() {
		return Transfer{}, fmt.Errorf("%w: redistribute from %d devices to %d", ErrGraph, from.Devices(), to.Devices())
	}
	f, err := m.spread(from)
	if err != nil {
		return Transfer{}, err
	}
	t, err := m.spread(to)
	if err != nil {
		return Transfer{}, err
	}
	return m.transfer(f, t), nil
}

// spread is a layout resolved to boxes: each rank's, and the distinct
// ones (which partition the tensor, splits being even) with the servers
// holding each.
type spread struct {
	boxes []parallel.Box
	own   []int // rank → index in parts
	parts []part
	key   string // equal for layouts that give every rank the same box
}

type part struct {
	box     parallel.Box
	servers map[int]bool
}

func (m Machine) spread(l parallel.Layout) (*spread, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	n := l.Devices()
	s := &spread{boxes: make([]parallel.Box, n), own: make([]int, n)}
	index := map[string]int{}
	var key strings.Builder
	for r := range n {
		b, err := l.Box(r)
		if err != nil {
			return nil, err
		}
		offset := fmt.Sprint(b.Offset, b.Shape)
		key.WriteString(offset)
		k, ok := index[offset]
		if !ok {
			k = len(s.parts)
			index[offset] = k
			s.parts = append(s.parts, part{box: b, servers: map[int]bool{}})
		}
		s.parts[k].servers[m.server(r)] = true
		s.boxes[r], s.own[r] = b, k
	}
	s.key = key.String()
	return s, nil
}

// transfer counts what each rank receives going from one spread of a
// tensor to another.
func (m Machine) transfer(from, to *spread) Transfer {
	n := len(to.boxes)
	t := Transfer{Intra: make([]int64, n), Inter: make([]int64, n)}
	for r := range n {
		for k, p := range from.parts {
			if k == from.own[r] {
				continue
			}
			bytes := overlap(to.boxes[r], p.box) * BytesPerElement
			switch {
			case bytes == 0:
			case p.servers[m.server(r)]:
				t.Intra[r] += bytes
			default:
				t.Inter[r] += bytes
			}
		}
	}
	return t
}

// overlap is the number of elements two boxes of a tensor share.
func overlap(a, b parallel.Box) int64 {
	n := int64(1)
	for k := range a.Offset {
		lo := max(a.Offset[k], b.Offset[k])
		hi := min(a.Offset[k]+a.Shape[k], b.Offset[k]+b.Shape[k])
		if hi <= lo {
			return 0
		}
		n *= int64(hi - lo)
	}
	return n
}

// Seconds is the time of the transfer: the slowest rank's receiving time
// plus one latency of the slowest link used (nothing when no rank
// receives anything).
func (t Transfer) Seconds(m Machine) float64 {
	worst := 0.0
	var intra, inter bool
	within, between := m.link(Redistribution, false), m.link(Redistribution, true)
	for r := range t.Intra {
		s := float64(t.Intra[r])/within.Bandwidth + float64(t.Inter[r])/between.Bandwidth
		worst = max(worst, s)
		intra = intra || t.Intra[r] > 0
		inter = inter || t.Inter[r] > 0
	}
	switch {
	case inter:
		return worst + between.Latency.Seconds()
	case intra:
		return worst + within.Latency.Seconds()
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
