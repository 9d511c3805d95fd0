//go:build !amd64

package collective

import "unsafe"

const addBcastBlock = 64

const haveAddBcast = false

func addBcastNT(srcs, dsts []unsafe.Pointer, n int, divisor float32) {
	panic("collective: addBcastNT without a vector kernel")
}
