package main

import "fmt"

// conv3x3_amd64.s: the direct 3×3 convolution kernels, one per row count
// of a GEMM AVX-512 panel.

const conv3x3Doc = `Direct 3×3 convolution micro-kernels for AVX-512F: a rows×32 tile of C
over taps taps of k input channels each, B read in place. Tap t's channel
l is the 32 floats at b + offs[t] + l·sb (bytes); A is packed as for
gemmKernelAVX512 (12 floats per step, taps one after another), so each
element is the same FMA chain as that kernel over the packed taps gives:
c = fma(beta, c, acc).`

func writeConv3x3(a *asm) {
	a.p("")
	a.comment(conv3x3Doc)
	for _, rows := range []int{avx512Rows, 8, 4} {
		writeConv3x3Kernel(a, rows)
	}
}

func writeConv3x3Kernel(a *asm, rows int) {
	t := tile{rows: rows, vecs: avx512Vecs, lanes: 16, reg: "Z"}
	name := kernelName("conv3x3KernelAVX512", rows, avx512Rows)
	a.text(name, "(k, taps int, a, b *float32, offs *int, sb int, c *float32, ldc int, beta float32)", "", 68)
	a.args(1, "taps BX", "a SI", "b R8", "offs R9", "sb R10")
	a.p("\tSHLQ $2, R10")
	a.zero("VPXORD", "Z", 0, rows*t.vecs)
	tap, step, accumulate := fmt.Sprint("tap", rows), fmt.Sprint("step", rows), fmt.Sprint("accumulate", rows)
	a.lines(tap+":", "MOVQ (R9), DI", "ADDQ R8, DI", "ADDQ $8, R9", "MOVQ k+0(FP), CX", step+":")
	t.fmaStep(a, func(v int) string { return fmt.Sprintf("%s(DI)", off(v*t.lanes*4)) }, []string{"Z24", "Z25"},
		func(i int) string { return fmt.Sprintf("%d(SI)", i*4) }, [2]string{"Z26", "Z27"})
	a.lines(fmt.Sprintf("ADDQ $%d, SI", avx512Rows*4), "ADDQ R10, DI", "DECQ CX", "JNZ "+step, "DECQ BX", "JNZ "+tap)
	a.args(6, "c R11", "ldc R12")
	a.p("\tSHLQ $2, R12")
	betaIsZero(a, "beta+64(FP)", accumulate)
	t.writeC(a, "R11", "R12", "", false)
	a.p("%s:", accumulate)
	a.p("\tVBROADCASTSS beta+64(FP), Z26")
	t.writeC(a, "R11", "R12", "Z26", false)
}
