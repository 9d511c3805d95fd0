package parallel

import (
	"testing"
)

// CopyBox moves exactly the box: every element of a 3-D box lands where its
// indices say, in both directions, and nothing else is touched.
func TestCopyBox(t *testing.T) {
	shape := []int{4, 5, 6}
	whole := make([]float32, shapeVolume(shape))
	for i := range 4 {
		for j := range 5 {
			for k := range 6 {
				whole[(i*5+j)*6+k] = float32(i*100 + j*10 + k)
			}
		}
	}
	off, ext := []int{1, 2, 3}, []int{2, 3, 2}
	box := make([]float32, shapeVolume(ext))
	CopyBox(box, ext, nil, whole, shape, off, ext)
	for i := range ext[0] {
		for j := range ext[1] {
			for k := range ext[2] {
				want := float32((off[0]+i)*100 + (off[1]+j)*10 + off[2] + k)
				if got := box[(i*ext[1]+j)*ext[2]+k]; got != want {
					t.Fatalf("box[%d,%d,%d] = %v, want %v", i, j, k, got, want)
				}
			}
		}
	}
	back := make([]float32, shapeVolume(shape))
	CopyBox(back, shape, off, box, ext, nil, ext)
	n := 0
	for idx, v := range back {
		if v != 0 {
			n++
			if v != whole[idx] {
				t.Fatalf("element %d is %v, want %v", idx, v, whole[idx])
			}
		}
	}
	if n != shapeVolume(ext) { // every value of the box is at least 123
		t.Errorf("%d elements written back, want %d", n, shapeVolume(ext))
	}
	scalar := []float32{7}
	dst := []float32{0}
	CopyBox(dst, nil, nil, scalar, nil, nil, nil)
	if dst[0] != 7 {
		t.Errorf("scalar copied as %v", dst[0])
	}
}

func shapeVolume(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}
