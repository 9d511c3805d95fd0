package diag

import (
	"bytes"
	"sort"
)

// Locator turns byte offsets in a text into 1-based lines and columns;
// columns count bytes, as Go tools do. Rank tables use it for every value,
// specs for the first byte that is not text.
type Locator struct {
	size   int
	starts []int // offset at which each line starts; starts[0] == 0
}

// NewLocator indexes the line starts of data.
func NewLocator(data []byte) *Locator {
	l := &Locator{size: len(data), starts: []int{0}}
	for off := 0; ; {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
		l.starts = append(l.starts, off)
	}
	return l
}

// Position returns the line and column of the byte at off. An offset past
// the end names the place just after the last byte, where "end of file"
// problems are reported; a negative one names the first byte.
func (l *Locator) Position(off int) (line, col int) {
	off = min(max(off, 0), l.size)
	line = sort.SearchInts(l.starts, off+1) // the first line starting after off, 1-based
	return line, off - l.starts[line-1] + 1
}
