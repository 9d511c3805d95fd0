package main

// elementwise_amd64.s: the AVX2 loops of elementwise.go (see there for what
// each computes).

const elementwiseDoc = `Element-wise loops with AVX2 and FMA3 (see elementwise.go for what each
computes). Lengths are whole multiples of the loop's step and at least one
step; sums keep four float64 chains per quantity, added in a fixed order.`

func writeElementwise(a *asm) {
	a.p("")
	a.comment(elementwiseDoc)

	// Sums: Y0–Y3 hold four float64 chains of the first sum, Y4–Y7 of the
	// second, 16 floats a step.
	a.text("sumSqAVX2", "(x *float32, n int) (sum, sumSq float64)", "sum = Σx[i], sumSq = Σx[i]², i < n, in float64.", 32)
	a.args(0, "x SI", "n CX")
	sumsLoop(a, "sumsqloop", func() {
		cvtQuarters(a, "SI", 8)
		for q := 0; q < 4; q++ {
			a.p("\tVADDPD Y%d, Y%d, Y%d", 8+q, q, q)
		}
		for q := 0; q < 4; q++ {
			a.p("\tVFMADD231PD Y%d, Y%d, Y%d", 8+q, 8+q, 4+q)
		}
	})
	sumsResults(a, "sum+16(FP)", "sumSq+24(FP)")

	a.text("affineAVX2", "(y, x *float32, n int, s, t, lo float32)", "y[i] = max(lo, fma(x[i], s, t)), i < n (lo −∞: no clamp).", 36)
	a.args(0, "y DI", "x SI", "n CX")
	broadcasts(a, 24, "s", "t", "lo")
	mapLoop(a, "affineloop", "VMOVUPS (SI)(AX*1), Y0", "VFMADD213PS Y9, Y8, Y0",
		"VMAXPS Y0, Y10, Y0", "VMOVUPS Y0, (DI)(AX*1)")

	a.text("affineAddAVX2", "(y, x, r *float32, n int, s, t, lo float32)", "y[i] = max(lo, fma(x[i], s, t) + r[i]), i < n.", 44)
	a.args(0, "y DI", "x SI", "r DX", "n CX")
	broadcasts(a, 32, "s", "t", "lo")
	mapLoop(a, "affineaddloop", "VMOVUPS (SI)(AX*1), Y0", "VFMADD213PS Y9, Y8, Y0",
		"VADDPS (DX)(AX*1), Y0, Y0", "VMAXPS Y0, Y10, Y0", "VMOVUPS Y0, (DI)(AX*1)")

	a.text("gradSumsAVX2", "(dy, x *float32, n int) (sumD, sumDX float64)", "sumD = Σdy[i], sumDX = Σdy[i]·x[i], i < n, in float64.", 40)
	a.args(0, "dy SI", "x DI", "n CX")
	sumsLoop(a, "gradsumsloop", func() {
		cvtQuarters(a, "SI", 8)
		cvtQuarters(a, "DI", 12)
		for q := 0; q < 4; q++ {
			a.p("\tVADDPD Y%d, Y%d, Y%d", 8+q, q, q)
		}
		for q := 0; q < 4; q++ {
			a.p("\tVFMADD231PD Y%d, Y%d, Y%d", 8+q, 12+q, 4+q)
		}
	})
	sumsResults(a, "sumD+24(FP)", "sumDX+32(FP)")

	// The mask m > 0 (ordered, not equal: NaN is not positive) selects dy.
	a.text("maskedGradSumsAVX2", "(out, dy, x, m *float32, n int) (sumD, sumDX float64)",
		"out[i] = dy[i] where m[i] > 0, else 0; the sums of gradSumsAVX2 over out and x.", 56)
	a.args(0, "out R8", "dy SI", "x DI", "m DX", "n CX")
	a.lines("SHLQ $2, CX", "XORQ AX, AX")
	a.zero("VXORPD", "Y", 0, 8)
	a.zero("VXORPS", "Y", 8, 9)
	loop(a, "maskedloop", 64, func() {
		for h := 0; h < 2; h++ {
			o := off(32 * h)
			a.p("\tVMOVUPS %s(DX)(AX*1), Y9", o)
			a.lines("VCMPPS $0x1e, Y8, Y9, Y9")
			a.p("\tVANDPS %s(SI)(AX*1), Y9, Y10", o)
			a.p("\tVMOVUPS Y10, %s(R8)(AX*1)", o)
			a.lines("VCVTPS2PD X10, Y11", "VEXTRACTF128 $1, Y10, X12", "VCVTPS2PD X12, Y12")
			a.p("\tVCVTPS2PD %s(DI)(AX*1), Y13", o)
			a.p("\tVCVTPS2PD %d(DI)(AX*1), Y14", 32*h+16)
			a.p("\tVADDPD Y11, Y%d, Y%d", 2*h, 2*h)
			a.p("\tVADDPD Y12, Y%d, Y%d", 2*h+1, 2*h+1)
			a.p("\tVFMADD231PD Y11, Y13, Y%d", 4+2*h)
			a.p("\tVFMADD231PD Y12, Y14, Y%d", 5+2*h)
		}
	})
	sumsResults(a, "sumD+40(FP)", "sumDX+48(FP)")

	a.text("linCombAVX2", "(dx, dy, x *float32, n int, a, b, c, xm float32)", "dx[i] = fma(a, dy[i], fma(b, x[i]−xm, c)), i < n.", 48)
	a.args(0, "dx R8", "dy SI", "x DI", "n CX")
	broadcasts(a, 32, "a", "b", "c", "xm")
	mapLoop(a, "lincombloop", "VMOVUPS (DI)(AX*1), Y0", "VSUBPS Y11, Y0, Y0", "VFMADD213PS Y10, Y9, Y0",
		"VMOVUPS (SI)(AX*1), Y1", "VFMADD231PS Y1, Y8, Y0", "VMOVUPS Y0, (R8)(AX*1)")

	a.text("reluGradAVX2", "(out, dy, y *float32, n int)", "out[i] = dy[i] where y[i] > 0, else 0, i < n.", 32)
	a.args(0, "out R8", "dy SI", "y DI", "n CX")
	a.lines("SHLQ $2, CX", "XORQ AX, AX", "VXORPS Y8, Y8, Y8")
	loop(a, "relugradloop", 32, func() {
		a.lines("VMOVUPS (DI)(AX*1), Y0", "VCMPPS $0x1e, Y8, Y0, Y0", "VANDPS (SI)(AX*1), Y0, Y0", "VMOVUPS Y0, (R8)(AX*1)")
	})
	a.ret()

	a.text("addAVX2", "(out, a, b *float32, n int)", "out[i] = a[i] + b[i], i < n.", 32)
	a.args(0, "out R8", "a SI", "b DI", "n CX")
	mapLoop(a, "addloop", "VMOVUPS (SI)(AX*1), Y0", "VADDPS (DI)(AX*1), Y0, Y0", "VMOVUPS Y0, (R8)(AX*1)")

	writeRowKernels(a)
}

// sumsLoop clears the eight float64 chains and runs body over 16 floats a
// step.
func sumsLoop(a *asm, label string, body func()) {
	a.lines("SHLQ $2, CX", "XORQ AX, AX")
	a.zero("VXORPD", "Y", 0, 8)
	loop(a, label, 64, body)
}

// cvtQuarters widens the 16 floats at ptr to float64 in Y<first>…Y<first+3>.
func cvtQuarters(a *asm, ptr string, first int) {
	for q := 0; q < 4; q++ {
		a.p("\tVCVTPS2PD %s(%s)(AX*1), Y%d", off(16*q), ptr, first+q)
	}
}

// sumsResults adds each quantity's four chains, (0+1)+(2+3) and then the
// lanes, stores the two sums and returns.
func sumsResults(a *asm, first, second string) {
	for i, dst := range []string{first, second} {
		b := 4 * i
		a.p("\tVADDPD Y%d, Y%d, Y%d", b+1, b, b)
		a.p("\tVADDPD Y%d, Y%d, Y%d", b+3, b+2, b+2)
		a.p("\tVADDPD Y%d, Y%d, Y%d", b+2, b, b)
		a.p("\tVEXTRACTF128 $1, Y%d, X%d", b, b+1)
		a.p("\tVADDPD X%d, X%d, X%d", b+1, b, b)
		a.p("\tVHADDPD X%d, X%d, X%d", b, b, b)
		a.p("\tMOVSD X%d, %s", b, dst)
	}
	a.ret()
}

// broadcasts fills Y8, Y9, … with the float32 arguments named, the first
// at frame offset at.
func broadcasts(a *asm, at int, names ...string) {
	for i, n := range names {
		a.p("\tVBROADCASTSS %s+%d(FP), Y%d", n, at+4*i, 8+i)
	}
}

// mapLoop runs body, one 8-float vector a step, over the CX floats and
// returns.
func mapLoop(a *asm, label string, body ...string) {
	a.lines("SHLQ $2, CX", "XORQ AX, AX")
	loop(a, label, 32, func() { a.lines(body...) })
	a.ret()
}

// loop runs body with AX from 0 by step bytes while AX < CX (at least once).
func loop(a *asm, label string, step int, body func()) {
	a.p("%s:", label)
	body()
	a.p("\tADDQ $%d, AX", step)
	a.lines("CMPQ AX, CX", "JLT "+label)
}

// writeRowKernels emits the row copies of Conv3x3's padded layout (each
// row preceded by a zero float) and the stride-2 phase split and merge.
func writeRowKernels(a *asm) {
	a.text("padRowsAVX2", "(dst, src *float32, rows, w int)",
		"dst row r (w+1 floats from r·(w+1)) = 0 then src row r (w floats); w is a\npositive multiple of 8.", 32)
	a.args(0, "dst DI", "src SI", "rows BX", "w CX")
	a.lines("SHLQ $2, CX", "padrow:", "MOVL $0, (DI)", "XORQ AX, AX")
	loop(a, "padcol", 32, func() { a.lines("VMOVUPS (SI)(AX*1), Y0", "VMOVUPS Y0, 4(DI)(AX*1)") })
	a.lines("LEAQ 4(DI)(CX*1), DI", "ADDQ CX, SI", "DECQ BX", "JNZ padrow")
	a.ret()

	for _, add := range []bool{false, true} {
		name, label, params, doc := "unpackRowsAVX2", "unpack", "(dst, src *float32, rows, w int)",
			"dst row r (w floats) = src row r (w floats from r·(w+1)+1); w is a\npositive multiple of 8."
		specs := []string{"dst DI", "src SI", "rows BX", "w CX"}
		if add {
			name, label, params, doc = "unpackAddRowsAVX2", "unpackadd", "(dst, src, add *float32, rows, w int)",
				"As unpackRowsAVX2 with add's rows (laid out as dst's) added."
			specs = []string{"dst DI", "src SI", "add DX", "rows BX", "w CX"}
		}
		a.text(name, params, doc, 8*len(specs))
		a.args(0, specs...)
		a.lines("SHLQ $2, CX", label+"row:", "XORQ AX, AX")
		loop(a, label+"col", 32, func() {
			a.lines("VMOVUPS 4(SI)(AX*1), Y0")
			if add {
				a.lines("VADDPS (DX)(AX*1), Y0, Y0")
			}
			a.lines("VMOVUPS Y0, (DI)(AX*1)")
		})
		a.lines("LEAQ 4(SI)(CX*1), SI", "ADDQ CX, DI")
		if add {
			a.lines("ADDQ CX, DX")
		}
		a.lines("DECQ BX", "JNZ "+label+"row")
		a.ret()
	}

	a.text("splitRowsAVX2", "(even, odd, src *float32, rows, w int)",
		`For each of rows source rows of 2w floats, 4w floats apart (every other
row of an image twice as wide as the phases), writes a zero and then its
even-indexed elements to a row of even, and likewise its odd ones to odd;
those rows are w+1 floats apart. w is a multiple of 8.`, 40)
	a.args(0, "even DI", "odd DX", "src SI", "rows BX", "w CX")
	a.lines("SHLQ $2, CX", "splitrow:", "MOVL $0, (DI)", "MOVL $0, (DX)", "XORQ AX, AX", "MOVQ SI, R8")
	loop(a, "splitcol", 32, func() {
		a.lines("VMOVUPS (R8), Y0", "VMOVUPS 32(R8), Y1",
			"VSHUFPS $0x88, Y1, Y0, Y2", "VSHUFPS $0xDD, Y1, Y0, Y3", // even and odd lanes, 128-bit halves interleaved
			"VPERMPD $0xD8, Y2, Y2", "VPERMPD $0xD8, Y3, Y3", // put the halves in order
			"VMOVUPS Y2, 4(DI)(AX*1)", "VMOVUPS Y3, 4(DX)(AX*1)", "ADDQ $64, R8")
	})
	a.lines("LEAQ 4(DI)(CX*1), DI", "LEAQ 4(DX)(CX*1), DX", "LEAQ (SI)(CX*4), SI", "DECQ BX", "JNZ splitrow")
	a.ret()

	a.text("mergeRowsAVX2", "(dst, even, odd, add *float32, rows, w int)",
		`The inverse of splitRowsAVX2: for each of rows rows of even and odd (w+1
floats apart, the first float of each skipped), writes their elements
alternately to a row of 2w floats of dst, rows 4w floats apart, adding
add's row at the same place when add is not nil. w is a multiple of 8.`, 48)
	a.args(0, "dst DI", "even SI", "odd DX", "add R9", "rows BX", "w CX")
	a.lines("SHLQ $2, CX", "mergerow:", "XORQ AX, AX", "MOVQ DI, R8", "MOVQ R9, R10")
	loop(a, "mergecol", 32, func() {
		a.lines("VMOVUPS 4(SI)(AX*1), Y0", "VMOVUPS 4(DX)(AX*1), Y1",
			"VUNPCKLPS Y1, Y0, Y2", "VUNPCKHPS Y1, Y0, Y3",
			"VPERM2F128 $0x20, Y3, Y2, Y4", "VPERM2F128 $0x31, Y3, Y2, Y5",
			"TESTQ R9, R9", "JZ mergestore",
			"VADDPS (R10), Y4, Y4", "VADDPS 32(R10), Y5, Y5", "ADDQ $64, R10",
			"mergestore:", "VMOVUPS Y4, (R8)", "VMOVUPS Y5, 32(R8)", "ADDQ $64, R8")
	})
	a.lines("LEAQ 4(SI)(CX*1), SI", "LEAQ 4(DX)(CX*1), DX", "LEAQ (DI)(CX*4), DI",
		"TESTQ R9, R9", "JZ mergenext", "LEAQ (R9)(CX*4), R9", "mergenext:", "DECQ BX", "JNZ mergerow")
	a.ret()
}
