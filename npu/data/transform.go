package data

import "math"

// The kernels below work on planar images (CHW: channel planes, each
// row-major), the layout of the CIFAR-10 file. MindSpore decodes records to
// HWC, transforms them, and ends with HWC2CHW; staying planar throughout
// gives the same output without the two transpositions. Kernels never
// allocate; the caller owns every buffer.

// CropFlip writes into dst (channels×height×width) the crop of src
// (channels×height×width) zero-padded by padding pixels on every side, taken
// at (top, left) in the padded image, then mirrored left–right if flip.
// This is RandomCrop((h, w), (p, p, p, p)) with fill value 0 followed by
// RandomHorizontalFlip, for given random draws; top and left are in
// [0, 2*padding].
func CropFlip(dst, src []byte, channels, height, width, padding, top, left int, flip bool) {
	plane := height * width
	for c := range channels {
		in := src[c*plane : (c+1)*plane]
		out := dst[c*plane : (c+1)*plane]
		for y := range height {
			row := out[y*width : (y+1)*width]
			sy := y + top - padding
			if sy < 0 || sy >= height {
				clear(row)
				continue
			}
			srcRow := in[sy*width : (sy+1)*width]
			// Output column x shows cropped column x, or width-1-x when
			// flipped; cropped column u is source column u+left-padding.
			for x := range width {
				u := x
				if flip {
					u = width - 1 - x
				}
				sx := u + left - padding
				if sx < 0 || sx >= width {
					row[x] = 0
				} else {
					row[x] = srcRow[sx]
				}
			}
		}
	}
}

// resizeAxis holds the precomputed source rows/columns and weights of a
// bilinear resize from srcSize to dstSize along one axis.
type resizeAxis struct {
	lo, hi []int
	w      []float32 // weight of hi; 1-w is the weight of lo
}

// newResizeAxis maps destination pixel centres to source coordinates with
// half-pixel alignment, src = (d+0.5)*srcSize/dstSize - 0.5, clamped to the
// edge (OpenCV's INTER_LINEAR convention, which MindSpore's Resize uses).
func newResizeAxis(srcSize, dstSize int) resizeAxis {
	a := resizeAxis{lo: make([]int, dstSize), hi: make([]int, dstSize), w: make([]float32, dstSize)}
	scale := float64(srcSize) / float64(dstSize)
	for d := range dstSize {
		f := (float64(d)+0.5)*scale - 0.5
		lo := int(math.Floor(f))
		w := f - float64(lo)
		switch {
		case lo < 0:
			lo, w = 0, 0
		case lo >= srcSize-1:
			lo, w = srcSize-1, 0
		}
		hi := lo + 1
		if hi > srcSize-1 {
			hi = srcSize - 1
		}
		a.lo[d], a.hi[d], a.w[d] = lo, hi, float32(w)
	}
	return a
}

// Resizer is a bilinear resize between two fixed planar image sizes.
type Resizer struct {
	channels, srcH, srcW, dstH, dstW int
	rows, cols                       resizeAxis
}

// NewResizer prepares a bilinear resize of channels×srcH×srcW planar images
// to channels×dstH×dstW.
func NewResizer(channels, srcH, srcW, dstH, dstW int) *Resizer {
	return &Resizer{
		channels: channels, srcH: srcH, srcW: srcW, dstH: dstH, dstW: dstW,
		rows: newResizeAxis(srcH, dstH), cols: newResizeAxis(srcW, dstW),
	}
}

// Resize writes the resized src into dst. Values are interpolated in float32
// and rounded half up to bytes, as the seeds resize a uint8 image before
// Rescale; OpenCV's fixed-point arithmetic can differ from this by one level
// on some pixels.
func (r *Resizer) Resize(dst, src []byte) {
	srcPlane, dstPlane := r.srcH*r.srcW, r.dstH*r.dstW
	for c := range r.channels {
		in := src[c*srcPlane : (c+1)*srcPlane]
		out := dst[c*dstPlane : (c+1)*dstPlane]
		for y := range r.dstH {
			top := in[r.rows.lo[y]*r.srcW:]
			bottom := in[r.rows.hi[y]*r.srcW:]
			wy := r.rows.w[y]
			row := out[y*r.dstW : (y+1)*r.dstW]
			for x := range r.dstW {
				lo, hi, wx := r.cols.lo[x], r.cols.hi[x], r.cols.w[x]
				t := float32(top[lo]) + wx*(float32(top[hi])-float32(top[lo]))
				b := float32(bottom[lo]) + wx*(float32(bottom[hi])-float32(bottom[lo]))
				v := t + wy*(b-t)
				row[x] = uint8(v + 0.5)
			}
		}
	}
}

// NormTable maps every byte value of every channel to its float32 output
// after Rescale(rescale, shift) and Normalize(mean, std):
// ((v*rescale + shift) - mean[c]) / std[c], evaluated in float32 in that
// order. A table lookup replaces the arithmetic per pixel.
type NormTable [Channels][256]float32

// NewNormTable builds the table for the given constants.
func NewNormTable(rescale, shift float32, mean, std [Channels]float32) *NormTable {
	var t NormTable
	for c := range Channels {
		for v := range 256 {
			x := float32(v)*rescale + shift
			t[c][v] = (x - mean[c]) / std[c]
		}
	}
	return &t
}

// Apply writes the normalized float32 planes of the planar byte image src
// (Channels planes of plane pixels each) into dst.
func (t *NormTable) Apply(dst []float32, src []byte, plane int) {
	for c := range Channels {
		lut := &t[c]
		in := src[c*plane : (c+1)*plane]
		out := dst[c*plane : (c+1)*plane]
		for i, v := range in {
			out[i] = lut[v]
		}
	}
}

// ApplyWindow is Apply for the box of the square planar image src (side
// pixels a side) at offset with shape (channel, row, column): only the box
// is normalized, into dst as a C×H×W block.
func (t *NormTable) ApplyWindow(dst []float32, src []byte, side int, offset, shape [3]int) {
	plane := side * side
	i := 0
	for c := offset[0]; c < offset[0]+shape[0]; c++ {
		lut := &t[c]
		for y := offset[1]; y < offset[1]+shape[1]; y++ {
			row := src[c*plane+y*side+offset[2] : c*plane+y*side+offset[2]+shape[2]]
			for _, v := range row {
				dst[i] = lut[v]
				i++
			}
		}
	}
}
