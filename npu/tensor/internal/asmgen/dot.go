package main

import (
	"fmt"
	"strings"
)

// dot_amd64.s: the dot-product kernels of Workers.GemmNT, which read rows
// of A and B in place. A kernel holds a ta×tb tile of vector partial sums:
// for each row pair (i, j) and lane q,
//
//	acc[(i·tb+j)·lanes+q] += Σ_l a_i[l·lanes+q]·b_j[l·lanes+q]  (FMA, l in order)
//
// loaded from acc at the start and stored back; dotReduceAVX512 then adds
// the lanes of each vector.

// dotKernel is one dot kernel: ta rows of A (registers aRegs) by tb rows
// of B (bRegs), accumulators in reg<0…ta·tb-1>, A vectors loaded into
// reg<ta·tb…>, and B vectors into bVec(j).
type dotKernel struct {
	name, doc    string
	reg          string
	lanes        int
	aRegs, bRegs []string
	bVec         func(j int) string
	label        string // suffix of the loop's labels
}

func writeDot(a *asm) {
	dotKernel{
		name: "dotKernelAVX2", reg: "Y", lanes: 8, label: "2",
		doc: "3×4 tile of A·Bᵀ with AVX2 and FMA3, 8 lanes per pair (acc holds pair (i, j)\n" +
			"at 8·(4i+j)); k is a multiple of 8. Twelve accumulators, three A vectors and\n" +
			"one B register fill the 16 registers: a step reads 7 vectors for 12\n" +
			"multiply-adds (a 2×4 tile read 6 for 8, more than the L2 cache delivers).",
		aRegs: []string{"R8", "R9", "R10"}, bRegs: []string{"R12", "R13", "R14", "R15"},
		bVec: func(int) string { return "Y15" },
	}.write(a)
	writeDotReduce(a)
	dotKernel{
		name: "dotKernelAVX512x6", reg: "Z", lanes: 16, label: "512x6",
		doc: "4×6 tile of A·Bᵀ with AVX-512F, 16 lanes per pair (acc holds pair (i, j)\n" +
			"at 16·(6i+j)); k is a multiple of 16. Each B row is loaded once per step\n" +
			"for four rows of A, so a step reads 10 vectors for 24 multiply-adds.",
		aRegs: []string{"R8", "R9", "R10", "R11"}, bRegs: []string{"R12", "R13", "R14", "R15", "SI", "DI"},
		bVec: func(int) string { return "Z28" },
	}.write(a)
}

func (d dotKernel) write(a *asm) {
	ta, tb := len(d.aRegs), len(d.bRegs)
	vbytes := d.lanes * 4
	var params, specs []string
	for i, r := range d.aRegs {
		params = append(params, fmt.Sprintf("a%d", i))
		specs = append(specs, fmt.Sprintf("a%d %s", i, r))
	}
	for j, r := range d.bRegs {
		params = append(params, fmt.Sprintf("b%d", j))
		specs = append(specs, fmt.Sprintf("b%d %s", j, r))
	}
	a.text(d.name, fmt.Sprintf("(k int, %s *float32, acc *float32)", strings.Join(params, ", ")), d.doc, 8*(ta+tb+2))
	a.args(0, "k CX")
	a.args(1, specs...)
	a.args(1+ta+tb, "acc AX")
	a.vectors(true, d.reg, 0, ta*tb, vbytes, "AX")
	a.lines("SHLQ $2, CX", "XORQ DX, DX", "TESTQ CX, CX", "JEQ done"+d.label, "loop"+d.label+":")
	aVec := func(i int) string { return fmt.Sprintf("%s%d", d.reg, ta*tb+i) }
	for i, r := range d.aRegs {
		a.p("\tVMOVUPS (%s)(DX*1), %s", r, aVec(i))
	}
	for j, r := range d.bRegs {
		a.p("\tVMOVUPS (%s)(DX*1), %s", r, d.bVec(j))
		for i := range d.aRegs {
			a.p("\tVFMADD231PS %s, %s, %s%d", d.bVec(j), aVec(i), d.reg, i*tb+j)
		}
	}
	a.lines(fmt.Sprintf("ADDQ $%d, DX", vbytes), "CMPQ DX, CX", "JLT loop"+d.label, "done"+d.label+":")
	a.vectors(false, d.reg, 0, ta*tb, vbytes, "AX")
	a.ret()
}

// writeDotReduce emits dotReduceAVX512: each 16-lane vector is halved twice
// (upper 256 bits onto the lower, then upper 128), and horizontal adds of
// four such 4-lane vectors give four sums at a time.
func writeDotReduce(a *asm) {
	a.text("dotReduceAVX512", "(acc *float32, sums *float32)",
		"sums[p] = the 16 lanes of acc[16p:16p+16] added as a tree, p < 16.", 16)
	a.args(0, "acc SI", "sums DI")
	for g := 0; g < 4; g++ {
		for q := 0; q < 4; q++ {
			a.p("\tVMOVUPS %d(SI), Z%d", (4*g+q)*64, q)
			a.p("\tVEXTRACTF64X4 $1, Z%d, Y%d", q, q+4)
			a.p("\tVADDPS Y%d, Y%d, Y%d", q+4, q, q)
			a.p("\tVEXTRACTF128 $1, Y%d, X%d", q, q+4)
			a.p("\tVADDPS X%d, X%d, X%d", q+4, q, q)
		}
		a.lines("VHADDPS X1, X0, X0", "VHADDPS X3, X2, X2", "VHADDPS X2, X0, X0")
		a.p("\tVMOVUPS X0, %d(DI)", 16*g)
	}
	a.ret()
}
