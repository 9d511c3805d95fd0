package auto

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mspipe/mspipe/internal/bytesize"
)

// FormatStrategy writes an operator strategy as a spec writes it:
// [[1, 1], [1, 2]].
func FormatStrategy(s [][]int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, in := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('[')
		for k, n := range in {
			if k > 0 {
				b.WriteString(", ")
			}
			fmt.Fprint(&b, n)
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

// Format writes the plan as a table, one operator a row (its strategy,
// compute and communication time, memory per rank), then the totals: the
// predicted step time and the peak memory per rank.
func (p *Plan) Format(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operator\tkind\tstrategy\tdevices used\tcompute\tcomm\tmemory")
	for _, c := range p.Ops {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.Op, c.Kind, FormatStrategy(c.Strategy), c.Used,
			seconds(c.ComputeSeconds), seconds(c.CommSeconds), bytesize.Format(c.Memory))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	fits := "fits"
	if !p.Fits() {
		fits = "does NOT fit"
	}
	_, err := fmt.Fprintf(w, "%s on %d devices: predicted step %s (compute %s, communication %s); peak memory %s per rank, %s the device's %s\n",
		p.Model, p.Devices, seconds(p.StepSeconds), seconds(p.ComputeSeconds), seconds(p.CommSeconds), bytesize.Format(p.PeakMemory), fits, bytesize.Format(p.Machine.Memory))
	if err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// seconds formats a duration in seconds with three significant digits in
// a fitting unit.
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s >= 1:
		return fmt.Sprintf("%#.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%#.3g ms", s*1e3)
	case s >= 1e-6:
		return fmt.Sprintf("%#.3g µs", s*1e6)
	}
	return fmt.Sprintf("%#.3g ns", s*1e9)
}
