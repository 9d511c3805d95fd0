//go:build !amd64 || purego

package tensor

// useElemAsm reports false: this build has no element-wise assembly.
func useElemAsm() bool { return false }

func sumSqAsm(x []float32) (sum, sumSq float64)                    { panic("tensor: no assembly") }
func affineAsm(y, x, r []float32, s, t float32, relu bool)         { panic("tensor: no assembly") }
func gradSumsAsm(dy, x []float32) (sumD, sumDX float64)            { panic("tensor: no assembly") }
func maskedGradSumsAsm(out, dy, x, m []float32) (float64, float64) { panic("tensor: no assembly") }
func linCombAsm(dx, dy, x []float32, a, b, c, xm float32)          { panic("tensor: no assembly") }
func reluGradAsm(out, dy, y []float32)                             { panic("tensor: no assembly") }
func addAsm(out, a, b []float32)                                   { panic("tensor: no assembly") }

func padRowsAsm(dst, src []float32, rows, w int) bool         { return false }
func unpackRowsAsm(dst, src, add []float32, rows, w int) bool { return false }

func splitRowsAsm(even, odd, src []float32, rows, w int) bool      { return false }
func mergeRowsAsm(dst, even, odd, add []float32, rows, w int) bool { return false }
