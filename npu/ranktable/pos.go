package ranktable

import "fmt"

// Pos is a place in a rank table file. Line and Col are 1-based; Col counts
// bytes, as Go tools do. The zero Pos means "no position" (for tables built
// in memory, such as the output of Generate).
type Pos struct {
	Offset int // byte offset from the start of the file
	Line   int
	Col    int
}

// IsValid reports whether p names a place in a file.
func (p Pos) IsValid() bool { return p.Line > 0 }

// String returns "line:col", or "-" for the zero Pos.
func (p Pos) String() string {
	if !p.IsValid() {
		return "-"
	}
	return fmt.Sprintf("%d:%d", p.Line, p.Col)
}
