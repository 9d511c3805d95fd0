package auto

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mspipe/mspipe/internal/bytesize"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/nn"
)

// Ascend910 is a cluster of Ascend 910 training servers (Atlas 800
// model 9000: 8 devices a server), from public figures:
//
//   - FLOPS 256 TFLOP/s: the Ascend 910's FP16 peak (Huawei's Hot Chips 31
//     presentation, August 2019, and its launch announcement). It is a
//     peak, and MindSpore trains in mixed precision: the step times it
//     gives are lower bounds.
//   - Memory 32 GiB: the device's HBM2 ([nn.Ascend910Memory]).
//   - IntraServer 30 GB/s: one HCCS port, 240 Gbit/s (Hot Chips 31: three
//     HCCS ports a chip, the devices of a server linked by them).
//   - InterServer 12.5 GB/s: the 100 GbE RoCE v2 port each device has
//     (Hot Chips 31; one port a device in an Atlas 800 9000).
//   - Latencies 10 µs within a server and 30 µs between servers: an
//     assumption of this model (no public figure), the order of a small
//     HCCL collective.
func Ascend910() Machine {
	return Machine{
		FLOPS:            256e12,
		IntraServer:      Link{Bandwidth: 30e9, Latency: 10 * time.Microsecond},
		InterServer:      Link{Bandwidth: 12.5e9, Latency: 30 * time.Microsecond},
		DevicesPerServer: 8,
		Memory:           nn.Ascend910Memory,
	}
}

// Presets are the machines a name selects (mspipe plan --machine NAME).
var Presets = map[string]func() Machine{"ascend910": Ascend910}

// MaxMachineFileSize bounds a machine file, which holds a few numbers.
const MaxMachineFileSize = 64 << 10

// LoadMachine reads a machine file (YAML or JSON):
//
//	flops: 256e12            # FLOP/s of one device
//	memory: 32GiB            # one device's memory (bytes, or with a unit)
//	devices_per_server: 8
//	intra_server: {bandwidth: 30e9, latency: 10us}    # bytes/s, a duration
//	inter_server: {bandwidth: 12.5e9, latency: 30us}
//
// Every key is required and no other is allowed; errors name the file,
// line and key.
func LoadMachine(ctx context.Context, path string) (Machine, error) {
	data, err := userfile.ReadFile(ctx, path, MaxMachineFileSize)
	if err != nil {
		return Machine{}, fmt.Errorf("%w: read %s: %w", ErrMachine, path, err)
	}
	return ParseMachine(path, data)
}

// ParseMachine decodes the content of a machine file named name (see
// [LoadMachine]) and validates it.
func ParseMachine(name string, data []byte) (Machine, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Machine{}, fmt.Errorf("%w: %s: %w", ErrMachine, name, err)
	}
	if len(doc.Content) == 0 {
		return Machine{}, fmt.Errorf("%w: %s: empty, want flops, memory, devices_per_server, intra_server and inter_server", ErrMachine, name)
	}
	d := machineDecoder{name: name}
	var m Machine
	d.object(doc.Content[0], "", map[string]func(*yaml.Node, string){
		"flops":              func(n *yaml.Node, key string) { m.FLOPS = d.number(n, key) },
		"memory":             func(n *yaml.Node, key string) { m.Memory = d.size(n, key) },
		"devices_per_server": func(n *yaml.Node, key string) { m.DevicesPerServer = d.count(n, key) },
		"intra_server":       func(n *yaml.Node, key string) { m.IntraServer = d.link(n, key) },
		"inter_server":       func(n *yaml.Node, key string) { m.InterServer = d.link(n, key) },
	})
	if d.err != nil {
		return Machine{}, d.err
	}
	if err := m.Validate(); err != nil {
		return Machine{}, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// machineDecoder keeps the first error of a machine file, positioned.
type machineDecoder struct {
	name string
	err  error
}

func (d *machineDecoder) fail(n *yaml.Node, key, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s:%d:%d: %s: %s", ErrMachine, d.name, n.Line, n.Column, key, fmt.Sprintf(format, args...))
	}
}

// object decodes a mapping whose keys must be exactly those of fields.
func (d *machineDecoder) object(n *yaml.Node, prefix string, fields map[string]func(*yaml.Node, string)) {
	where := strings.TrimSuffix(prefix, ".")
	if where == "" {
		where = "the machine"
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, where, "want a mapping of %s", keyList(fields))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		decode, ok := fields[k.Value]
		switch {
		case !ok:
			d.fail(k, prefix+k.Value, "unknown key (want %s)", keyList(fields))
		case seen[k.Value]:
			d.fail(k, prefix+k.Value, "given twice")
		default:
			seen[k.Value] = true
			decode(v, prefix+k.Value)
		}
	}
	for _, k := range sortedKeys(fields) {
		if !seen[k] {
			d.fail(n, prefix+k, "missing")
		}
	}
}

func keyList(fields map[string]func(*yaml.Node, string)) string {
	return strings.Join(sortedKeys(fields), ", ")
}

func sortedKeys(fields map[string]func(*yaml.Node, string)) []string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (d *machineDecoder) scalar(n *yaml.Node, key string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, key, "want a single value")
		return "", false
	}
	return n.Value, true
}

func (d *machineDecoder) number(n *yaml.Node, key string) float64 {
	s, ok := d.scalar(n, key)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || v > 1e30 {
		d.fail(n, key, "%q: want a positive number such as 256e12", s)
		return 0
	}
	return v
}

func (d *machineDecoder) count(n *yaml.Node, key string) int {
	s, ok := d.scalar(n, key)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > 1<<20 {
		d.fail(n, key, "%q: want a whole number from 1 to %d", s, 1<<20)
		return 0
	}
	return v
}

func (d *machineDecoder) size(n *yaml.Node, key string) int64 {
	s, ok := d.scalar(n, key)
	if !ok {
		return 0
	}
	v, err := bytesize.Parse(s)
	if err != nil {
		d.fail(n, key, "%v", err)
		return 0
	}
	return v
}

func (d *machineDecoder) link(n *yaml.Node, key string) Link {
	var l Link
	d.object(n, key+".", map[string]func(*yaml.Node, string){
		"bandwidth": func(n *yaml.Node, key string) { l.Bandwidth = d.number(n, key) },
		"latency": func(n *yaml.Node, key string) {
			s, ok := d.scalar(n, key)
			if !ok {
				return
			}
			v, err := time.ParseDuration(s)
			if err != nil || v < 0 || v > time.Minute {
				d.fail(n, key, "%q: want a duration from 0 to 1m such as 10us or 2ms", s)
				return
			}
			l.Latency = v
		},
	})
	return l
}
