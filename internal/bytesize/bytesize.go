// Package bytesize reads and writes byte counts the one way mspipe does
// everywhere: Parse reads what users write in specs and flags (512MiB,
// 2 GiB, 3KB), Format writes what messages, logs and reports show
// (512 B, 3.0 MiB, 32 GiB).
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// units are the binary units Format writes, each 1024 times the one
// before it.
const units = "KMGTP"

// Parse reads a byte count: a whole number with an optional unit B, KiB,
// MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000),
// optionally after a space. The count must be positive and below 2^62.
// What Format writes as a whole number (1023 B, 7 GiB) Parse reads back.
func Parse(s string) (int64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSpace(s[len(num):])
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || mult == 0 || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a positive size such as 512MiB or 2GiB", s)
	}
	return n * mult, nil
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
