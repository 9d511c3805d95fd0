//go:build amd64 && !purego

#include "textflag.h"

// Element-wise loops with AVX2 and FMA3 (see elementwise.go for what each
// computes). Lengths are whole multiples of the loop's step and at least one
// step; sums keep four float64 chains per quantity, added in a fixed order.

// func sumSqAVX2(x *float32, n int) (sum, sumSq float64)
TEXT ·sumSqAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
sumsqloop:
	VCVTPS2PD (SI)(AX*1), Y8
	VCVTPS2PD 16(SI)(AX*1), Y9
	VCVTPS2PD 32(SI)(AX*1), Y10
	VCVTPS2PD 48(SI)(AX*1), Y11
	VADDPD Y8, Y0, Y0
	VADDPD Y9, Y1, Y1
	VADDPD Y10, Y2, Y2
	VADDPD Y11, Y3, Y3
	VFMADD231PD Y8, Y8, Y4
	VFMADD231PD Y9, Y9, Y5
	VFMADD231PD Y10, Y10, Y6
	VFMADD231PD Y11, Y11, Y7
	ADDQ $64, AX
	CMPQ AX, CX
	JLT sumsqloop
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	MOVSD X0, sum+16(FP)
	VADDPD Y5, Y4, Y4
	VADDPD Y7, Y6, Y6
	VADDPD Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPD X5, X4, X4
	VHADDPD X4, X4, X4
	MOVSD X4, sumSq+24(FP)
	VZEROUPPER
	RET

// func affineAVX2(y, x *float32, n int, s, t, lo float32)
TEXT ·affineAVX2(SB), NOSPLIT, $0-36
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS s+24(FP), Y8
	VBROADCASTSS t+28(FP), Y9
	VBROADCASTSS lo+32(FP), Y10
	SHLQ $2, CX
	XORQ AX, AX
affineloop:
	VMOVUPS (SI)(AX*1), Y0
	VFMADD213PS Y9, Y8, Y0
	VMAXPS Y0, Y10, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT affineloop
	VZEROUPPER
	RET

// func affineAddAVX2(y, x, r *float32, n int, s, t, lo float32)
TEXT ·affineAddAVX2(SB), NOSPLIT, $0-44
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ r+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Y8
	VBROADCASTSS t+36(FP), Y9
	VBROADCASTSS lo+40(FP), Y10
	SHLQ $2, CX
	XORQ AX, AX
affineaddloop:
	VMOVUPS (SI)(AX*1), Y0
	VFMADD213PS Y9, Y8, Y0
	VADDPS (DX)(AX*1), Y0, Y0
	VMAXPS Y0, Y10, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT affineaddloop
	VZEROUPPER
	RET

// func gradSumsAVX2(dy, x *float32, n int) (sumD, sumDX float64)
TEXT ·gradSumsAVX2(SB), NOSPLIT, $0-40
	MOVQ dy+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
gradsumsloop:
	VCVTPS2PD (SI)(AX*1), Y8
	VCVTPS2PD 16(SI)(AX*1), Y9
	VCVTPS2PD 32(SI)(AX*1), Y10
	VCVTPS2PD 48(SI)(AX*1), Y11
	VCVTPS2PD (DI)(AX*1), Y12
	VCVTPS2PD 16(DI)(AX*1), Y13
	VCVTPS2PD 32(DI)(AX*1), Y14
	VCVTPS2PD 48(DI)(AX*1), Y15
	VADDPD Y8, Y0, Y0
	VADDPD Y9, Y1, Y1
	VADDPD Y10, Y2, Y2
	VADDPD Y11, Y3, Y3
	VFMADD231PD Y8, Y12, Y4
	VFMADD231PD Y9, Y13, Y5
	VFMADD231PD Y10, Y14, Y6
	VFMADD231PD Y11, Y15, Y7
	ADDQ $64, AX
	CMPQ AX, CX
	JLT gradsumsloop
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	MOVSD X0, sumD+24(FP)
	VADDPD Y5, Y4, Y4
	VADDPD Y7, Y6, Y6
	VADDPD Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPD X5, X4, X4
	VHADDPD X4, X4, X4
	MOVSD X4, sumDX+32(FP)
	VZEROUPPER
	RET

// func maskedGradSumsAVX2(out, dy, x, m *float32, n int) (sumD, sumDX float64)
TEXT ·maskedGradSumsAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), R8
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DI
	MOVQ m+24(FP), DX
	MOVQ n+32(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
maskedloop:
	VMOVUPS (DX)(AX*1), Y9
	VCMPPS $0x1e, Y8, Y9, Y9
	VANDPS (SI)(AX*1), Y9, Y10
	VMOVUPS Y10, (R8)(AX*1)
	VCVTPS2PD X10, Y11
	VEXTRACTF128 $1, Y10, X12
	VCVTPS2PD X12, Y12
	VCVTPS2PD (DI)(AX*1), Y13
	VCVTPS2PD 16(DI)(AX*1), Y14
	VADDPD Y11, Y0, Y0
	VADDPD Y12, Y1, Y1
	VFMADD231PD Y11, Y13, Y4
	VFMADD231PD Y12, Y14, Y5
	VMOVUPS 32(DX)(AX*1), Y9
	VCMPPS $0x1e, Y8, Y9, Y9
	VANDPS 32(SI)(AX*1), Y9, Y10
	VMOVUPS Y10, 32(R8)(AX*1)
	VCVTPS2PD X10, Y11
	VEXTRACTF128 $1, Y10, X12
	VCVTPS2PD X12, Y12
	VCVTPS2PD 32(DI)(AX*1), Y13
	VCVTPS2PD 48(DI)(AX*1), Y14
	VADDPD Y11, Y2, Y2
	VADDPD Y12, Y3, Y3
	VFMADD231PD Y11, Y13, Y6
	VFMADD231PD Y12, Y14, Y7
	ADDQ $64, AX
	CMPQ AX, CX
	JLT maskedloop
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	MOVSD X0, sumD+40(FP)
	VADDPD Y5, Y4, Y4
	VADDPD Y7, Y6, Y6
	VADDPD Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPD X5, X4, X4
	VHADDPD X4, X4, X4
	MOVSD X4, sumDX+48(FP)
	VZEROUPPER
	RET

// func linCombAVX2(dx, dy, x *float32, n int, a, b, c, xm float32)
TEXT ·linCombAVX2(SB), NOSPLIT, $0-48
	MOVQ dx+0(FP), R8
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTSS a+32(FP), Y8
	VBROADCASTSS b+36(FP), Y9
	VBROADCASTSS c+40(FP), Y10
	VBROADCASTSS xm+44(FP), Y11
	SHLQ $2, CX
	XORQ AX, AX
lincombloop:
	VMOVUPS (DI)(AX*1), Y0
	VSUBPS Y11, Y0, Y0
	VFMADD213PS Y10, Y9, Y0
	VMOVUPS (SI)(AX*1), Y1
	VFMADD231PS Y1, Y8, Y0
	VMOVUPS Y0, (R8)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT lincombloop
	VZEROUPPER
	RET

// func reluGradAVX2(out, dy, y *float32, n int)
TEXT ·reluGradAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), R8
	MOVQ dy+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
	VXORPS Y8, Y8, Y8
relugradloop:
	VMOVUPS (DI)(AX*1), Y0
	VCMPPS $0x1e, Y8, Y0, Y0
	VANDPS (SI)(AX*1), Y0, Y0
	VMOVUPS Y0, (R8)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT relugradloop
	VZEROUPPER
	RET

// func addAVX2(out, a, b *float32, n int)
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), R8
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ n+24(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
addloop:
	VMOVUPS (SI)(AX*1), Y0
	VADDPS (DI)(AX*1), Y0, Y0
	VMOVUPS Y0, (R8)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT addloop
	VZEROUPPER
	RET

// func padRowsAVX2(dst, src *float32, rows, w int)
// dst row r (w+1 floats from r·(w+1)) = 0 then src row r (w floats); w is a
// positive multiple of 8.
TEXT ·padRowsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+16(FP), BX
	MOVQ w+24(FP), CX
	SHLQ $2, CX
padrow:
	MOVL $0, (DI)
	XORQ AX, AX
padcol:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS Y0, 4(DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT padcol
	LEAQ 4(DI)(CX*1), DI
	ADDQ CX, SI
	DECQ BX
	JNZ padrow
	VZEROUPPER
	RET

// func unpackRowsAVX2(dst, src *float32, rows, w int)
// dst row r (w floats) = src row r (w floats from r·(w+1)+1); w is a
// positive multiple of 8.
TEXT ·unpackRowsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+16(FP), BX
	MOVQ w+24(FP), CX
	SHLQ $2, CX
unpackrow:
	XORQ AX, AX
unpackcol:
	VMOVUPS 4(SI)(AX*1), Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT unpackcol
	LEAQ 4(SI)(CX*1), SI
	ADDQ CX, DI
	DECQ BX
	JNZ unpackrow
	VZEROUPPER
	RET

// func unpackAddRowsAVX2(dst, src, add *float32, rows, w int)
// As unpackRowsAVX2 with add's rows (laid out as dst's) added.
TEXT ·unpackAddRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ add+16(FP), DX
	MOVQ rows+24(FP), BX
	MOVQ w+32(FP), CX
	SHLQ $2, CX
unpackaddrow:
	XORQ AX, AX
unpackaddcol:
	VMOVUPS 4(SI)(AX*1), Y0
	VADDPS (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, CX
	JLT unpackaddcol
	LEAQ 4(SI)(CX*1), SI
	ADDQ CX, DI
	ADDQ CX, DX
	DECQ BX
	JNZ unpackaddrow
	VZEROUPPER
	RET

// func splitRowsAVX2(even, odd, src *float32, rows, w int)
// For each of rows source rows of 2w floats, 4w floats apart (every other
// row of an image twice as wide as the phases), writes a zero and then its
// even-indexed elements to a row of even, and likewise its odd ones to odd;
// those rows are w+1 floats apart. w is a multiple of 8.
TEXT ·splitRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ even+0(FP), DI
	MOVQ odd+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ rows+24(FP), BX
	MOVQ w+32(FP), CX
	SHLQ $2, CX
splitrow:
	MOVL $0, (DI)
	MOVL $0, (DX)
	XORQ AX, AX
	MOVQ SI, R8
splitcol:
	VMOVUPS (R8), Y0
	VMOVUPS 32(R8), Y1
	VSHUFPS $0x88, Y1, Y0, Y2
	VSHUFPS $0xDD, Y1, Y0, Y3
	VPERMPD $0xD8, Y2, Y2
	VPERMPD $0xD8, Y3, Y3
	VMOVUPS Y2, 4(DI)(AX*1)
	VMOVUPS Y3, 4(DX)(AX*1)
	ADDQ $64, R8
	ADDQ $32, AX
	CMPQ AX, CX
	JLT splitcol
	LEAQ 4(DI)(CX*1), DI
	LEAQ 4(DX)(CX*1), DX
	LEAQ (SI)(CX*4), SI
	DECQ BX
	JNZ splitrow
	VZEROUPPER
	RET

// func mergeRowsAVX2(dst, even, odd, add *float32, rows, w int)
// The inverse of splitRowsAVX2: for each of rows rows of even and odd (w+1
// floats apart, the first float of each skipped), writes their elements
// alternately to a row of 2w floats of dst, rows 4w floats apart, adding
// add's row at the same place when add is not nil. w is a multiple of 8.
TEXT ·mergeRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ even+8(FP), SI
	MOVQ odd+16(FP), DX
	MOVQ add+24(FP), R9
	MOVQ rows+32(FP), BX
	MOVQ w+40(FP), CX
	SHLQ $2, CX
mergerow:
	XORQ AX, AX
	MOVQ DI, R8
	MOVQ R9, R10
mergecol:
	VMOVUPS 4(SI)(AX*1), Y0
	VMOVUPS 4(DX)(AX*1), Y1
	VUNPCKLPS Y1, Y0, Y2
	VUNPCKHPS Y1, Y0, Y3
	VPERM2F128 $0x20, Y3, Y2, Y4
	VPERM2F128 $0x31, Y3, Y2, Y5
	TESTQ R9, R9
	JZ mergestore
	VADDPS (R10), Y4, Y4
	VADDPS 32(R10), Y5, Y5
	ADDQ $64, R10
mergestore:
	VMOVUPS Y4, (R8)
	VMOVUPS Y5, 32(R8)
	ADDQ $64, R8
	ADDQ $32, AX
	CMPQ AX, CX
	JLT mergecol
	LEAQ 4(SI)(CX*1), SI
	LEAQ 4(DX)(CX*1), DX
	LEAQ (DI)(CX*4), DI
	TESTQ R9, R9
	JZ mergenext
	LEAQ (R9)(CX*4), R9
mergenext:
	DECQ BX
	JNZ mergerow
	VZEROUPPER
	RET
