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
	_, err := fmt.Fprintf(w, "%s on %d devices: predicted step %s (compute %s, communication %s); predicted peak memory %s per rank (the cost model's parameters and activations), %s the device's %s\n",
		p.Model, p.Devices, seconds(p.StepSeconds), seconds(p.ComputeSeconds), seconds(p.CommSeconds), bytesize.Format(p.PeakMemory), fits, bytesize.Format(p.Machine.Memory))
	if err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	_, err = fmt.Fprintf(w, "communication per rank and step: %s within a server (%s/s links%s), %s between servers (%s/s links), %d devices a server\n",
		bytesize.Format(p.IntraBytes), rate(p.Machine.IntraServer.Bandwidth), kindRates(p.Machine), bytesize.Format(p.InterBytes), rate(p.Machine.InterServer.Bandwidth), p.Machine.DevicesPerServer)
	if err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// kindRates names the collective kinds that have a link of their own
// within a server, with its bandwidth ("; Exchange 500 MB/s"), or "".
func kindRates(m Machine) string {
	var b strings.Builder
	for k, l := range m.IntraServerByKind {
		if l.Bandwidth > 0 {
			fmt.Fprintf(&b, "; %v %s/s", Collective(k), rate(l.Bandwidth))
		}
	}
	return b.String()
}

// rate writes a bandwidth in bytes/s with three significant digits in a
// decimal unit.
func rate(bytesPerSecond float64) string {
	for _, u := range []struct {
		unit string
		size float64
	}{{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}} {
		if bytesPerSecond >= u.size {
			return sig3(bytesPerSecond/u.size) + " " + u.unit
		}
	}
	return sig3(bytesPerSecond) + " B"
}

// seconds formats a duration in seconds with three significant digits in
// a fitting unit, trailing zeros kept ("1.00 ms") but no bare point
// ("438 µs", not the "438." that %#g writes).
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s >= 1:
		return sig3(s) + " s"
	case s >= 1e-3:
		return sig3(s*1e3) + " ms"
	case s >= 1e-6:
		return sig3(s*1e6) + " µs"
	}
	return sig3(s*1e9) + " ns"
}

// sig3 writes v with three significant digits, keeping trailing zeros.
func sig3(v float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%#.3g", v), ".")
}
