package shard

import (
	"context"
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// piece is one box a rank copies to another (or to itself): its offset in
// the sender's slice, its offset in the receiver's slice, and its extent.
type piece struct{ from, to, shape []int }

// plan moves one rank's slice of a tensor from one layout to another. Every
// rank builds the plan of the whole job from the two layouts alone, so all
// agree on who sends what: each box a rank needs is read from one holder of
// it, the rank itself when it holds it, else one of the holders picked by
// the receiving rank's number (spreading the reads over the replicas).
type plan struct {
	// identity is set when every rank already holds what it needs: the
	// slice passes through and no rank calls Exchange.
	identity           bool
	srcShape, dstShape []int
	local              []piece   // boxes copied within this rank
	send, recv         [][]piece // per peer, in an order both ends share
	sendBuf, recvBuf   [][]float32
	out                *tensor.Tensor
	// with is a plan fused to this one (see fuse): runWith moves both in
	// one Exchange of bothSend and bothRecv, whose blocks hold this plan's
	// data and then with's; the two plans' buffers are views of them.
	with               *plan
	bothSend, bothRecv [][]float32
}

// newPlan returns rank's part of moving a tensor from layout from to
// layout to (same whole shape, same device count).
func newPlan(from, to parallel.Layout, rank int) (*plan, error) {
	devices := from.Devices()
	if to.Devices() != devices || !slices.Equal(from.Shape, to.Shape) {
		return nil, fmt.Errorf("redistribute %v over %d devices to %v over %d: %w", from.Shape, devices, to.Shape, to.Devices(), ErrConfig)
	}
	dst := make([]parallel.Box, devices)
	for r := range devices {
		var err error
		if dst[r], err = to.Box(r); err != nil {
			return nil, fmt.Errorf("redistribute: %w", err)
		}
	}
	return newBoxPlan(from, dst, rank)
}

// newBoxPlan returns rank's part of giving every rank r the box dst[r] of
// a tensor laid out as from: a redistribution when the boxes are another
// layout's, a halo gathering when they reach past the ranks' own slices.
func newBoxPlan(from parallel.Layout, dst []parallel.Box, rank int) (*plan, error) {
	devices := from.Devices()
	if len(dst) != devices {
		return nil, fmt.Errorf("redistribute %v over %d devices into %d boxes: %w", from.Shape, devices, len(dst), ErrConfig)
	}
	src := make([]parallel.Box, devices)
	identity := true
	for r := range devices {
		var err error
		if src[r], err = from.Box(r); err != nil {
			return nil, fmt.Errorf("redistribute: %w", err)
		}
		identity = identity && slices.Equal(src[r].Offset, dst[r].Offset) && slices.Equal(src[r].Shape, dst[r].Shape)
	}
	p := &plan{identity: identity, srcShape: src[rank].Shape, dstShape: dst[rank].Shape}
	if identity {
		return p, nil
	}
	// The distinct slices of the source layout, each with its holders in
	// rank order, in the order of their first holder.
	type holding struct {
		box     parallel.Box
		holders []int
	}
	var held []holding
	for r, b := range src {
		i := slices.IndexFunc(held, func(h holding) bool { return slices.Equal(h.box.Offset, b.Offset) })
		if i < 0 {
			held = append(held, holding{box: b})
			i = len(held) - 1
		}
		held[i].holders = append(held[i].holders, r)
	}
	p.send, p.recv = make([][]piece, devices), make([][]piece, devices)
	for r := range devices { // r receives
		for _, h := range held {
			common, ok := h.box.Intersect(dst[r])
			if !ok {
				continue
			}
			holder := h.holders[r%len(h.holders)]
			if slices.Contains(h.holders, r) {
				holder = r
			}
			if holder != rank && r != rank {
				continue
			}
			pc := piece{from: sub(common.Offset, h.box.Offset), to: sub(common.Offset, dst[r].Offset), shape: common.Shape}
			switch {
			case holder == rank && r == rank:
				p.local = append(p.local, pc)
			case holder == rank:
				p.send[r] = append(p.send[r], pc)
			default:
				p.recv[holder] = append(p.recv[holder], pc)
			}
		}
	}
	p.sendBuf, p.recvBuf = make([][]float32, devices), make([][]float32, devices)
	for q := range devices {
		p.sendBuf[q] = make([]float32, piecesVolume(p.send[q]))
		p.recvBuf[q] = make([]float32, piecesVolume(p.recv[q]))
	}
	return p, nil
}

func piecesVolume(ps []piece) int {
	n := 0
	for _, pc := range ps {
		n += volume(pc.shape)
	}
	return n
}

// bytes returns the memory the plan holds on the device: its output slice
// and its send and receive buffers.
func (p *plan) bytes() int64 {
	if p.identity {
		return 0
	}
	n := volume(p.dstShape)
	for q := range p.sendBuf {
		n += len(p.sendBuf[q]) + len(p.recvBuf[q])
	}
	return 4 * int64(n)
}

// fuse makes q travel with p (both redistributions of the same ranks, and
// neither an identity): every block p and q send to a peer becomes one
// block, p's part first, so runWith moves both in one Exchange, one round
// of the ranks instead of two. Each plan still runs alone as before.
func (p *plan) fuse(q *plan) {
	p.with = q
	join := func(a, b [][]float32) [][]float32 {
		both := make([][]float32, len(a))
		for r := range a {
			both[r] = make([]float32, len(a[r])+len(b[r]))
			a[r], b[r] = both[r][:len(a[r]):len(a[r])], both[r][len(a[r]):]
		}
		return both
	}
	p.bothSend, p.bothRecv = join(p.sendBuf, q.sendBuf), join(p.recvBuf, q.recvBuf)
}

// run redistributes src, this rank's slice in the source layout, and
// returns its slice in the target layout (src itself for an identity
// plan; else a tensor the plan owns, valid until its next run).
func (p *plan) run(ctx context.Context, comm Comm, src *tensor.Tensor) (*tensor.Tensor, error) {
	if err := p.checkSource(src); err != nil {
		return nil, err
	}
	if p.identity {
		return src, nil
	}
	if err := p.pack(src); err != nil {
		return nil, err
	}
	if err := comm.Exchange(ctx, p.sendBuf, p.recvBuf); err != nil {
		return nil, fmt.Errorf("redistribute: %w", err)
	}
	p.unpack()
	return p.out, nil
}

// runWith is run of p on src and of the plan fused to it on withSrc, in
// one Exchange; it returns both results.
func (p *plan) runWith(ctx context.Context, comm Comm, src, withSrc *tensor.Tensor) (out, withOut *tensor.Tensor, err error) {
	if err := p.pack(src); err != nil {
		return nil, nil, err
	}
	if err := p.with.pack(withSrc); err != nil {
		return nil, nil, err
	}
	if err := comm.Exchange(ctx, p.bothSend, p.bothRecv); err != nil {
		return nil, nil, fmt.Errorf("redistribute: %w", err)
	}
	p.unpack()
	p.with.unpack()
	return p.out, p.with.out, nil
}

func (p *plan) checkSource(src *tensor.Tensor) error {
	if !src.HasShape(p.srcShape...) {
		return fmt.Errorf("redistribute: slice %v, want %v: %w", src.Shape(), p.srcShape, tensor.ErrShape)
	}
	return nil
}

// pack copies what src sends into the send buffers, and what stays on
// this rank into the output.
func (p *plan) pack(src *tensor.Tensor) error {
	if err := p.checkSource(src); err != nil {
		return err
	}
	if p.out == nil {
		var err error
		if p.out, err = tensor.New(p.dstShape...); err != nil {
			return fmt.Errorf("redistribute: %w", err)
		}
	}
	s, d := src.Data(), p.out.Data()
	for q, pieces := range p.send {
		off := 0
		for _, pc := range pieces {
			parallel.CopyBox(p.sendBuf[q][off:], pc.shape, nil, s, p.srcShape, pc.from, pc.shape)
			off += volume(pc.shape)
		}
	}
	for _, pc := range p.local {
		parallel.CopyBox(d, p.dstShape, pc.to, s, p.srcShape, pc.from, pc.shape)
	}
	return nil
}

// unpack copies what was received into the output.
func (p *plan) unpack() {
	d := p.out.Data()
	for q, pieces := range p.recv {
		off := 0
		for _, pc := range pieces {
			parallel.CopyBox(d, p.dstShape, pc.to, p.recvBuf[q][off:], pc.shape, nil, pc.shape)
			off += volume(pc.shape)
		}
	}
}
