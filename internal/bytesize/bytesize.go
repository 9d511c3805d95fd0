// Package bytesize reads and writes byte counts the one way mspipe does
// everywhere: Parse reads what users write in specs and flags (512MiB,
// 2 GiB, 3KB), Format writes what messages, logs and reports show
// (512 B, 3.0 MiB, 32 GiB).
package bytesize

import (
	"fmt"
	"math/big"
	"strings"
)

// units are the binary units Format writes, each 1024 times the one
// before it.
const units = "KMGTP"

// Parse reads a byte count: a number with an optional unit B, KiB, MiB,
// GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), optionally
// after a space. The number may have decimals when the count comes out
// whole (1.5GiB, not 1.5B). The count must be positive and below 2^62.
// What Format writes (1023 B, 7 GiB, 1.5 MiB) Parse reads back, exactly
// when Format's figure is exact.
func Parse(s string) (int64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	unit := strings.TrimSpace(s[len(num):])
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	num = strings.TrimSpace(num)
	r, ok := new(big.Rat).SetString(num)
	bad := fmt.Errorf("%q: want a positive size such as 512MiB or 2GiB", s)
	// SetString also takes fractions and exponents: only digits and one point here.
	if !ok || mult == 0 || num == "" || strings.ContainsAny(num, "/eE") || num[0] == '.' || num[len(num)-1] == '.' {
		return 0, bad
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q: not a whole number of bytes", s)
	}
	n := r.Num()
	if n.Sign() <= 0 || n.Cmp(big.NewInt(1<<62)) > 0 {
		return 0, bad
	}
	return n.Int64(), nil
}

// Format writes a byte count in the largest binary unit it reaches, up to
// PiB: bytes as a whole number ("512 B"), and KiB or MiB with one decimal
// ("128.0 KiB", "1.5 MiB"); GiB and up with one decimal too, but as a
// whole number when exact ("32 GiB"), the way device memory is spoken of.
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, i := int64(unit), 0
	for n/div >= unit && i < len(units)-1 {
		div *= unit
		i++
	}
	if i >= 2 && n%div == 0 {
		return fmt.Sprintf("%d %ciB", n/div, units[i])
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), units[i])
}
