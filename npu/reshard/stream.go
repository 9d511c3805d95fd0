package reshard

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
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

// buffer is a reusable byte buffer whose capacity is accounted in a meter.
type buffer struct {
	m *meter
	b []byte
}

// get returns n bytes, growing the buffer (and its account) when needed.
func (b *buffer) get(n int64, what string) ([]byte, error) {
	if int64(cap(b.b)) < n {
		b.release()
		if err := b.m.grow(n, what); err != nil {
			return nil, err
		}
		b.b = make([]byte, n)
	}
	return b.b[:n], nil
}

func (b *buffer) release() {
	b.m.shrink(int64(cap(b.b)))
	b.b = nil
}

// floatBuffer is buffer for the float64 sums of the mean rule.
type floatBuffer struct {
	m *meter
	f []float64
}

func (b *floatBuffer) get(n int64, what string) ([]float64, error) {
	if int64(cap(b.f)) < n {
		b.release()
		if err := b.m.grow(8*n, what); err != nil {
			return nil, err
		}
		b.f = make([]float64, n)
	}
	return b.f[:n], nil
}

func (b *floatBuffer) release() {
	b.m.shrink(8 * int64(cap(b.f)))
	b.f = nil
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

// readTask is part of a band to read from one source box.
type readTask struct {
	p      piece
	region parallel.Box
}

// splitRows cuts a region into pieces of about chunk elements along dim 0,
// so that one big source box is read by several workers.
func splitRows(region parallel.Box, chunk int64) []parallel.Box {
	rowElems := volume(region.Shape[1:])
	rows := region.Shape[0]
	step := rows
	if rowElems > 0 && chunk > 0 {
		step = int(max(1, min(int64(rows), chunk/rowElems)))
	}
	var out []parallel.Box
	for lo := 0; lo < rows; lo += step {
		b := parallel.Box{Offset: append([]int(nil), region.Offset...), Shape: append([]int(nil), region.Shape...)}
		b.Offset[0] += lo
		b.Shape[0] = min(step, rows-lo)
		out = append(out, b)
	}
	return out
}

// fillBand reads the band's elements from the pieces (disjoint boxes that
// together cover it) with parallel ReadAt calls straight into band.
func fillBand(ctx context.Context, files []io.ReaderAt, reads []piece, band parallel.Box, buf []byte, elem int, workers int) error {
	const minChunkBytes = 1 << 20
	chunk := max(int64(len(buf))/int64(elem)/int64(workers), minChunkBytes/int64(elem))
	var tasks []readTask
	for _, p := range reads {
		common, ok := p.box.Intersect(band)
		if !ok {
			continue
		}
		for _, part := range splitRows(common, chunk) {
			tasks = append(tasks, readTask{p: p, region: part})
		}
	}
	e := int64(elem)
	return forEach(ctx, len(tasks), workers, func(i int) error {
		t := tasks[i]
		r := files[t.p.rank]
		return forEachRun(t.region, t.p.box, band, func(srcOff, dstOff, n int64) error {
			return t.p.t.ReadAt(r, buf[dstOff*e:(dstOff+n)*e], srcOff*e)
		})
	})
}

// meanBand fills buf with the element-wise mean of every read's rows
// [lo, hi), summed in float64 in rank order.
func meanBand(files []io.ReaderAt, reads []piece, dtype string, lo, hi int, rowBytes int64, buf []byte, scratch []byte, sums []float64) error {
	clear(sums)
	for _, p := range reads {
		if err := p.t.ReadAt(files[p.rank], scratch, int64(lo)*rowBytes); err != nil {
			return err
		}
		switch dtype {
		case ckpt.DTypeFloat32:
			for i := range sums {
				sums[i] += float64(math.Float32frombits(binary.LittleEndian.Uint32(scratch[4*i:])))
			}
		case ckpt.DTypeFloat64:
			for i := range sums {
				sums[i] += math.Float64frombits(binary.LittleEndian.Uint64(scratch[8*i:]))
			}
		}
	}
	n := float64(len(reads))
	for i, s := range sums {
		switch dtype {
		case ckpt.DTypeFloat32:
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(s/n)))
		case ckpt.DTypeFloat64:
			binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(s/n))
		}
	}
	return nil
}
