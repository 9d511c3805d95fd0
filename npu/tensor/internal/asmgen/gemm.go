package main

import "fmt"

// gemm_amd64.s: the register-blocked GEMM micro-kernels and the packing
// helpers.
//
// Every kernel has the signature of gemmKernelAVX512 in gemm_amd64.go and
// computes, for an mr×nr tile with A packed k-major (mr values per step) and
// B rows sb floats apart:
//
//	acc[i][j] = Σ_l a[l*mr+i]·b[l*sb+j]  (one FMA chain per element, l in order)
//	c[i*ldc+j] = fma(beta, c[i*ldc+j], alpha·acc[i][j])  (beta == 0: alpha·acc)

// Tile shape of the AVX-512 kernel: avx512Rows rows of C by avx512Vecs
// 16-float vectors. Keep avx512MR/avx512NR in gemm_generic.go in step.
const (
	avx512Rows = 12
	avx512Vecs = 2
)

// gemmKernel is one micro-kernel: a tile of C with A packed astride rows to
// a step of k.
type gemmKernel struct {
	name    string
	tile    tile
	astride int // floats per step of k in packed A: the full tile's rows
	regs    int // vector registers available
	doc     string
}

func writeGemm(a *asm) {
	// Each family has its full tile and kernels for fewer rows of a panel
	// packed for the full tile (the same arithmetic per element, so a short
	// panel at the bottom of C needs no scratch tile).
	var kernels []gemmKernel
	for _, rows := range []int{avx512Rows, 8, 4} {
		kernels = append(kernels, gemmKernel{name: kernelName("gemmKernelAVX512", rows, avx512Rows),
			tile: tile{rows: rows, vecs: avx512Vecs, lanes: 16, reg: "Z"}, astride: avx512Rows, regs: 32, doc: "AVX-512F"})
	}
	for _, rows := range []int{6, 4, 2} {
		kernels = append(kernels, gemmKernel{name: kernelName("gemmKernelAVX2", rows, 6),
			tile: tile{rows: rows, vecs: 2, lanes: 8, reg: "Y"}, astride: 6, regs: 16, doc: "AVX2 and FMA3"})
	}
	for _, k := range kernels {
		k.write(a)
	}
	for _, w := range []int{32, 16, 12, 6} {
		writePackCopy(a, w)
	}
	writePackTrans(a)
}

// kernelName is base for the full tile, base+"Rows<n>" for a short panel.
func kernelName(base string, rows, full int) string {
	if rows == full {
		return base
	}
	return fmt.Sprintf("%sRows%d", base, rows)
}

// gemmUnroll is the number of k steps per loop iteration: the loop
// addresses B rows through (R10*1), (R10*2) and (R11*1).
const gemmUnroll = 4

func (k gemmKernel) write(a *asm) {
	t := k.tile
	nacc := t.rows * t.vecs
	var bregs []string
	for v := 0; v < t.vecs; v++ {
		bregs = append(bregs, fmt.Sprintf("%s%d", t.reg, nacc+v))
	}
	// Two broadcast registers alternate so consecutive rows do not wait on
	// one register name (renaming covers it, but it keeps the code readable).
	bcast := [2]string{fmt.Sprintf("%s%d", t.reg, nacc+t.vecs), fmt.Sprintf("%s%d", t.reg, nacc+t.vecs+1)}
	if nacc+t.vecs+2 > k.regs {
		panic(fmt.Sprintf("%s: %d registers needed, %d available", k.name, nacc+t.vecs+2, k.regs))
	}
	vbytes := t.lanes * 4
	abytes := k.astride * 4

	a.text(k.name, "(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)",
		fmt.Sprintf("%d×%d tile with %s; A is packed %d rows to a step of k.", t.rows, t.vecs*t.lanes, k.doc, k.astride), 56)
	a.args(0, "k CX", "a SI", "b DI", "sb R10")
	a.p("\tSHLQ $2, R10") // B row stride in bytes
	a.p("\tLEAQ (R10)(R10*2), R11")
	a.p("\tMOVQ R10, R12")
	a.p("\tSHLQ $2, R12") // 4 B rows in bytes
	if t.reg == "Z" {
		a.zero("VPXORD", t.reg, 0, nacc)
	} else {
		a.zero("VXORPS", t.reg, 0, nacc)
	}
	// step emits one k step reading B at base (DI) plus index expression idx.
	step := func(u int, idx string) {
		t.fmaStep(a, func(v int) string { return fmt.Sprintf("%s(DI)%s", off(v*vbytes), idx) }, bregs,
			func(i int) string { return fmt.Sprintf("%s(SI)", off(u*abytes+i*4)) }, bcast)
	}
	a.p("\tCMPQ CX, $%d", gemmUnroll)
	a.p("\tJLT tail")
	a.p("loop:")
	idx := [gemmUnroll]string{"", "(R10*1)", "(R10*2)", "(R11*1)"}
	for u := 0; u < gemmUnroll; u++ {
		step(u, idx[u])
	}
	a.p("\tADDQ $%d, SI", gemmUnroll*abytes)
	a.p("\tADDQ R12, DI")
	a.p("\tSUBQ $%d, CX", gemmUnroll)
	a.p("\tCMPQ CX, $%d", gemmUnroll)
	a.p("\tJGE loop")
	a.p("tail:")
	a.p("\tTESTQ CX, CX")
	a.p("\tJEQ store")
	a.p("tailloop:")
	step(0, "")
	a.p("\tADDQ $%d, SI", abytes)
	a.p("\tADDQ R10, DI")
	a.p("\tDECQ CX")
	a.p("\tJNZ tailloop")

	a.p("store:")
	a.p("\tMOVQ c+32(FP), DX")
	a.p("\tMOVQ ldc+40(FP), R8")
	a.p("\tSHLQ $2, R8")
	alpha, beta := bregs[0], bregs[1]
	a.p("\tVBROADCASTSS alpha+48(FP), %s", alpha)
	a.p("\tVBROADCASTSS beta+52(FP), %s", beta)
	for i := 0; i < t.rows; i++ {
		for v := 0; v < t.vecs; v++ {
			a.p("\tVMULPS %s, %s, %s", alpha, t.acc(i, v), t.acc(i, v))
		}
	}
	betaIsZero(a, "beta+52(FP)", "update")
	t.writeC(a, "DX", "R8", "", false)
	a.p("update:")
	t.writeC(a, "DX", "R8", beta, true)
}

// writePackCopy emits gemmPackCopy<width>: rows of width floats, ld floats
// apart in src, copied to consecutive rows of dst (the packed layout of B,
// and of A when it is stored transposed).
func writePackCopy(a *asm, width int) {
	a.text(fmt.Sprintf("gemmPackCopy%d", width), "(dst *float32, src *float32, ld int, rows int)",
		fmt.Sprintf("dst[r·%d+j] = src[r·ld+j] for r < rows, j < %d.", width, width), 32)
	a.args(0, "dst DI", "src SI", "ld R8")
	a.p("\tSHLQ $2, R8")
	a.args(3, "rows CX")
	a.p("\tTESTQ CX, CX")
	a.p("\tJEQ done")
	a.p("loop:")
	at := 0
	reg := 0
	for rest := width; rest > 0; {
		switch {
		case rest >= 8:
			a.p("\tVMOVUPS %s(SI), Y%d", off(at), reg)
			a.p("\tVMOVUPS Y%d, %s(DI)", reg, off(at))
			at, rest = at+32, rest-8
		case rest >= 4:
			a.p("\tVMOVUPS %s(SI), X%d", off(at), reg)
			a.p("\tVMOVUPS X%d, %s(DI)", reg, off(at))
			at, rest = at+16, rest-4
		case rest >= 2:
			a.p("\tMOVQ %s(SI), AX", off(at))
			a.p("\tMOVQ AX, %s(DI)", off(at))
			at, rest = at+8, rest-2
		default:
			a.p("\tMOVL %s(SI), AX", off(at))
			a.p("\tMOVL AX, %s(DI)", off(at))
			at, rest = at+4, rest-1
		}
		reg = (reg + 1) % 4
	}
	a.p("\tADDQ R8, SI")
	a.p("\tADDQ $%d, DI", width*4)
	a.p("\tDECQ CX")
	a.p("\tJNZ loop")
	a.p("done:")
	a.ret()
}

// writePackTrans emits gemmPackTrans: dst[l*w+i] = src[i*ld+l] for i < w,
// l < k, the packed layout of A from row-major A (and of B when it is stored
// transposed). Sources are read along rows; stores go w floats apart.
func writePackTrans(a *asm) {
	a.text("gemmPackTrans", "(dst *float32, src *float32, ld int, k int, w int)", "dst[l·w+i] = src[i·ld+l] for i < w, l < k.", 40)
	a.args(0, "dst R11", "src R12", "ld R13")
	a.p("\tSHLQ $2, R13")
	a.args(4, "w R14")
	a.p("\tTESTQ R14, R14")
	a.p("\tJEQ done")
	a.p("\tMOVQ R14, R8")
	a.p("\tSHLQ $2, R8")          // one dst step of k in bytes
	a.p("\tLEAQ (R8)(R8*2), R10") // three steps
	a.p("\tMOVQ R8, R9")
	a.p("\tSHLQ $2, R9") // four steps
	a.p("row:")
	a.p("\tMOVQ R12, SI")
	a.p("\tMOVQ R11, DI")
	a.args(3, "k CX")
	a.lines("CMPQ CX, $4", "JLT tail", "quad:",
		"MOVL (SI), AX", "MOVL 4(SI), BX", "MOVL 8(SI), DX", "MOVL AX, (DI)", "MOVL 12(SI), AX",
		"MOVL BX, (DI)(R8*1)", "MOVL DX, (DI)(R8*2)", "MOVL AX, (DI)(R10*1)",
		"ADDQ $16, SI", "ADDQ R9, DI", "SUBQ $4, CX", "CMPQ CX, $4", "JGE quad",
		"tail:", "TESTQ CX, CX", "JEQ next",
		"one:", "MOVL (SI), AX", "MOVL AX, (DI)", "ADDQ $4, SI", "ADDQ R8, DI", "DECQ CX", "JNZ one",
		"next:", "ADDQ R13, R12", "ADDQ $4, R11", "DECQ R14", "JNZ row",
		"done:", "RET")
}
