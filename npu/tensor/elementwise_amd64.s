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
