package reshard

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// meter accounts for the tensor data the engine holds and remembers the
// most it held, so the cap is enforced where memory is taken and tests can
// compare what was really held with the cap.
type meter struct {
	mu         sync.Mutex
	held, peak int64
	limit      int64
}

func (m *meter) grow(n int64, what string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held+n > m.limit {
		return fmt.Errorf("%s needs %d bytes with %d held, over the cap of %d: %w", what, n, m.held, m.limit, ErrMemory)
	}
	m.held += n
	m.peak = max(m.peak, m.held)
	return nil
}

func (m *meter) shrink(n int64) {
	m.mu.Lock()
	m.held -= n
	m.mu.Unlock()
}

// forEachRun calls fn for every contiguous run of the elements of region,
// a box inside both a and b, in row-major order: aOff and bOff are the
// run's first element in a's and b's row-major layouts, n its length.
func forEachRun(region, a, b parallel.Box, fn func(aOff, bOff, n int64) error) error {
	nd := len(region.Shape)
	if volume(region.Shape) == 0 {
		return nil
	}
	j := nd - 1
	for j > 0 && region.Shape[j] == a.Shape[j] && region.Shape[j] == b.Shape[j] {
		j--
	}
	run := volume(region.Shape[j:])
	aStride, bStride := strides(a.Shape), strides(b.Shape)
	idx := make([]int, j) // position in the outer dims [0, j)
	for {
		var aOff, bOff int64
		for d := range nd {
			at := region.Offset[d]
			if d < j {
				at += idx[d]
			}
			aOff += int64(at-a.Offset[d]) * aStride[d]
			bOff += int64(at-b.Offset[d]) * bStride[d]
		}
		if err := fn(aOff, bOff, run); err != nil {
			return err
		}
		d := j - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < region.Shape[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return nil
		}
	}
}

func strides(shape []int) []int64 {
	s := make([]int64, len(shape))
	acc := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		s[d] = acc
		acc *= int64(shape[d])
	}
	return s
}

// bandBox is rows [lo, hi) of a tensor of geometry shape g.
func bandBox(g []int, lo, hi int) parallel.Box {
	b := wholeBox(g)
	b.Offset[0], b.Shape[0] = lo, hi-lo
	return b
}

// fullWidth reports whether box spans every dimension but the first of a
// tensor of geometry shape g, so that its rows are rows of the tensor.
func fullWidth(box parallel.Box, g []int) bool {
	for d := 1; d < len(g); d++ {
		if box.Offset[d] != 0 || box.Shape[d] != g[d] {
			return false
		}
	}
	return true
}

// needsScratch reports whether filling a band from reads needs a scatter
// buffer: some piece is narrower than the tensor.
func needsScratch(reads []piece, g []int) bool {
	for _, p := range reads {
		if !fullWidth(p.box, g) {
			return true
		}
	}
	return false
}

// readTask is rows [lo, hi) of a piece, to read into a band.
type readTask struct {
	p      piece
	lo, hi int // rows of the tensor
}

// fillBand reads the band's elements from the pieces (disjoint boxes that
// together cover it). A band spans whole rows, so the part of a piece it
// needs is one contiguous byte range of the piece's file: each task is a
// single ReadAt, straight into the band when the piece is as wide as the
// tensor, else into the worker's share of scratch and scattered from there.
// Tasks run on parallel workers.
func fillBand(ctx context.Context, files []*os.File, reads []piece, g []int, band parallel.Box, buf, scratch []byte, elem int, workers int) error {
	e := int64(elem)
	const minChunkBytes = 1 << 20
	chunkBytes := max(int64(len(buf))/int64(workers), minChunkBytes)
	var share int64 // scratch bytes per worker
	if len(scratch) > 0 {
		share = int64(len(scratch)) / int64(workers)
		var widest int64
		for _, p := range reads {
			if !fullWidth(p.box, g) {
				widest = max(widest, volume(p.box.Shape[1:])*e)
			}
		}
		if share < widest { // fewer workers, each with room for a row
			workers = max(1, int(int64(len(scratch))/widest))
			share = int64(len(scratch)) / int64(workers)
		}
	}
	var tasks []readTask
	for _, p := range reads {
		common, ok := p.box.Intersect(band)
		if !ok {
			continue
		}
		rowBytes := volume(p.box.Shape[1:]) * e
		limit := chunkBytes
		if !fullWidth(p.box, g) {
			limit = share
		}
		step := int(max(1, limit/max(rowBytes, 1)))
		for lo := common.Offset[0]; lo < common.Offset[0]+common.Shape[0]; lo += step {
			tasks = append(tasks, readTask{p: p, lo: lo, hi: min(lo+step, common.Offset[0]+common.Shape[0])})
		}
	}
	return forEachWorker(ctx, len(tasks), workers, func(w, i int) error {
		t := tasks[i]
		rowBytes := volume(t.p.box.Shape[1:]) * e
		src := int64(t.lo-t.p.box.Offset[0]) * rowBytes
		size := int64(t.hi-t.lo) * rowBytes
		r := files[t.p.rank]
		if fullWidth(t.p.box, g) {
			dst := int64(t.lo-band.Offset[0]) * rowBytes
			if err := t.p.t.ReadAt(r, buf[dst:dst+size], src); err != nil {
				return fmt.Errorf("%s: %w", r.Name(), err)
			}
			return nil
		}
		sc := scratch[int64(w)*share : int64(w)*share+size]
		if err := t.p.t.ReadAt(r, sc, src); err != nil {
			return fmt.Errorf("%s: %w", r.Name(), err)
		}
		region := parallel.Box{Offset: append([]int(nil), t.p.box.Offset...), Shape: append([]int(nil), t.p.box.Shape...)}
		region.Offset[0], region.Shape[0] = t.lo, t.hi-t.lo
		return forEachRun(region, region, band, func(srcOff, dstOff, n int64) error {
			copy(buf[dstOff*e:(dstOff+n)*e], sc[srcOff*e:(srcOff+n)*e])
			return nil
		})
	})
}

// meanChunk is how many elements the mean rule sums at a time; its
// buffers (one rank's chunk and the float64 sums) are meanBufferBytes.
const (
	meanChunk       = 32 << 10
	meanBufferBytes = meanChunk * (8 + 8)
)

// meanBand fills buf, rows [lo, hi) of the tensor, with the element-wise
// mean of every read's copy, summed in float64 in rank order, a chunk of
// meanChunk elements at a time.
func meanBand(files []*os.File, reads []piece, dtype string, lo int, rowBytes int64, buf []byte, scratch []byte, sums []float64) error {
	elem, _ := ckpt.DTypeSize(dtype)
	e := int64(elem)
	start := int64(lo) * rowBytes
	total := int64(len(buf)) / e
	for off := int64(0); off < total; off += meanChunk {
		n := min(meanChunk, total-off)
		s := sums[:n]
		clear(s)
		for _, p := range reads {
			sc := scratch[:n*e]
			if err := p.t.ReadAt(files[p.rank], sc, start+off*e); err != nil {
				return fmt.Errorf("%s: %w", files[p.rank].Name(), err)
			}
			switch dtype {
			case ckpt.DTypeFloat32:
				for i := range s {
					s[i] += float64(math.Float32frombits(binary.LittleEndian.Uint32(sc[4*i:])))
				}
			case ckpt.DTypeFloat64:
				for i := range s {
					s[i] += math.Float64frombits(binary.LittleEndian.Uint64(sc[8*i:]))
				}
			}
		}
		out := buf[off*e:]
		k := float64(len(reads))
		for i, v := range s {
			switch dtype {
			case ckpt.DTypeFloat32:
				binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(v/k)))
			case ckpt.DTypeFloat64:
				binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(v/k))
			}
		}
	}
	return nil
}
