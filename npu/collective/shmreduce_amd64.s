#include "textflag.h"

// func addBcastNT(srcs, dsts []unsafe.Pointer, n int, divisor float32)
//
// For i in [0, n): s = srcs[0][i] + srcs[1][i] + ... in that order, divided
// by divisor unless it is 0, is stored to dsts[k][i] for every k with
// non-temporal stores. n is a multiple of 64; every pointer is 32-byte
// aligned; len(srcs) >= 1.
TEXT ·addBcastNT(SB), NOSPLIT, $0-60
	MOVQ srcs_base+0(FP), SI
	MOVQ srcs_len+8(FP), R8
	MOVQ dsts_base+24(FP), DI
	MOVQ dsts_len+32(FP), R9
	MOVQ n+48(FP), CX
	VBROADCASTSS divisor+56(FP), Y15
	MOVL divisor+56(FP), R10
	SHLQ $2, CX
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE  done
	MOVQ (SI), DX
	VMOVUPS 0(DX)(AX*1), Y0
	VMOVUPS 32(DX)(AX*1), Y1
	VMOVUPS 64(DX)(AX*1), Y2
	VMOVUPS 96(DX)(AX*1), Y3
	VMOVUPS 128(DX)(AX*1), Y4
	VMOVUPS 160(DX)(AX*1), Y5
	VMOVUPS 192(DX)(AX*1), Y6
	VMOVUPS 224(DX)(AX*1), Y7
	MOVQ $1, BX

addsrc:
	CMPQ BX, R8
	JGE  scale
	MOVQ (SI)(BX*8), DX
	VADDPS 0(DX)(AX*1), Y0, Y0
	VADDPS 32(DX)(AX*1), Y1, Y1
	VADDPS 64(DX)(AX*1), Y2, Y2
	VADDPS 96(DX)(AX*1), Y3, Y3
	VADDPS 128(DX)(AX*1), Y4, Y4
	VADDPS 160(DX)(AX*1), Y5, Y5
	VADDPS 192(DX)(AX*1), Y6, Y6
	VADDPS 224(DX)(AX*1), Y7, Y7
	INCQ BX
	JMP  addsrc

scale:
	TESTL R10, R10
	JZ    store
	VDIVPS Y15, Y0, Y0
	VDIVPS Y15, Y1, Y1
	VDIVPS Y15, Y2, Y2
	VDIVPS Y15, Y3, Y3
	VDIVPS Y15, Y4, Y4
	VDIVPS Y15, Y5, Y5
	VDIVPS Y15, Y6, Y6
	VDIVPS Y15, Y7, Y7

store:
	XORQ BX, BX

storedst:
	CMPQ BX, R9
	JGE  next
	MOVQ (DI)(BX*8), DX
	VMOVNTPS Y0, 0(DX)(AX*1)
	VMOVNTPS Y1, 32(DX)(AX*1)
	VMOVNTPS Y2, 64(DX)(AX*1)
	VMOVNTPS Y3, 96(DX)(AX*1)
	VMOVNTPS Y4, 128(DX)(AX*1)
	VMOVNTPS Y5, 160(DX)(AX*1)
	VMOVNTPS Y6, 192(DX)(AX*1)
	VMOVNTPS Y7, 224(DX)(AX*1)
	INCQ BX
	JMP  storedst

next:
	ADDQ $256, AX
	JMP  loop

done:
	SFENCE
	VZEROUPPER
	RET
