package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/diag"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ranktable"
	"gopkg.in/yaml.v3"
)

// Limits that keep hostile or broken files from exhausting memory.
const (
	MaxFileSize = 4 << 20 // bytes; real specs are a few KiB
	// MaxExpandedSize bounds the text of a spec's values once aliases are
	// expanded, and of each stage's resolved `with`: run keeps both in
	// run.json, so a few aliases of a large value (a 2 MB file expanding
	// to gigabytes) would exhaust memory when the run saves its state.
	// Parse checks the expanded spec, so validate refuses what run would;
	// Resolver.With checks the values expressions produce at run time.
	MaxExpandedSize = MaxFileSize
	maxNodes        = 100_000 // YAML nodes visited, counting alias expansions
	maxDepth        = 64      // nesting of mappings and sequences
)

// identRe is the form of stage ids, param names and output names: they are
// expression identifiers (`stages.<id>.outputs.<name>`), so no dashes.
var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// usesRe is a stage reference: a namespaced built-in or plugin name
// (`cifar/prepare`, `exec`), or a path to a plugin binary (`./bin/x`).
var usesRe = regexp.MustCompile(`^([a-z][a-z0-9_-]*(/[a-z][a-z0-9_-]*)*|\.{1,2}/.+|/.+)$`)

// memoryRe is a size with a unit; the schema has the same pattern.
var memoryRe = regexp.MustCompile(`^[0-9]+ ?(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)$`)

// largeMemoryRe is a size in units larger than the largest limit; such a
// size is refused as too large, not as malformed.
var largeMemoryRe = regexp.MustCompile(`^[0-9]+ ?(PiB|EiB|ZiB|YiB|PB|EB|ZB|YB)$`)

// memoryTooLarge reports whether text, parsed by userfile.ParseSize into
// size or err, is a positive size beyond MaxMemoryLimit: in a unit above
// the limit, too large for ParseSize, or larger than the limit.
func memoryTooLarge(text string, size int64, err error) bool {
	if strings.Trim(strings.TrimRight(text, " BKMGTPEZYi"), "0") == "" {
		return false // no digits, or zero
	}
	return largeMemoryRe.MatchString(text) || memoryRe.MatchString(text) && (err != nil || size > MaxMemoryLimit)
}

var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

var (
	pipelineKeys = []string{"version", "name", "description", "params", "cluster", "env", "stages"}
	paramKeys    = []string{"type", "default", "description"}
	clusterKeys  = []string{"devices", "rank_table"}
	stageKeys    = []string{"uses", "description", "with", "needs", "if", "cluster", "timeout", "retry", "outputs", "env", "sha256", "limits"}
	limitsKeys   = []string{"memory"}
	retryKeys    = []string{"max_attempts", "backoff"}
	outputKeys   = []string{"type", "description"}
)

// Load reads and decodes the spec at path. The error is non-nil only when
// the file cannot be read; problems in its content are diagnostics.
func Load(path string) (*Pipeline, diag.List, error) {
	// A regular file only: a FIFO would block the open, a device the read.
	f, st, err := userfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read spec %s: %w", path, err)
	}
	defer f.Close()
	if st.Size() > MaxFileSize {
		var l problems
		l.addCode(Pos{File: path}, CodeTooLarge, "file is %d bytes, larger than the %d-byte limit for a spec", st.Size(), MaxFileSize)
		return nil, diag.List(l), nil
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, fmt.Errorf("read spec %s: %w", path, err)
	}
	p, errs := Parse(path, data)
	return p, errs, nil
}

// Parse decodes a spec held in memory; file names it in positions. The
// returned pipeline is usable (partially filled) even when there are errors,
// so that Validate can report more problems in one pass.
func Parse(file string, data []byte) (*Pipeline, diag.List) {
	d := &decoder{file: file}
	p := &Pipeline{File: file, BaseDir: filepath.Dir(file)}
	if len(data) > MaxFileSize {
		d.errs.addCode(Pos{File: file}, CodeTooLarge, "file is %d bytes, larger than the %d-byte limit for a spec", len(data), MaxFileSize)
		return p, diag.List(d.errs)
	}
	if off, ok := binaryAt(data); ok {
		line, col := diag.NewLocator(data).Position(off)
		d.errs.addCode(Pos{File: file, Line: line, Col: col}, CodeNotText, "not a text file: byte 0x%02x is not valid UTF-8 text", data[off])
		return p, diag.List(d.errs)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) || len(bytes.TrimSpace(data)) == 0 {
			d.errs.addCode(Pos{File: file, Line: 1, Col: 1}, CodeEmpty, "empty spec: expected a mapping with version, name and stages")
			return p, diag.List(d.errs)
		}
		d.syntaxError(err)
		return p, diag.List(d.errs)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errs.add(d.pos(&extra), "a spec holds one YAML document; found a second one (remove the `---`)")
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	p.root = root
	if size, over := expandedSize(root); over {
		d.errs.addCode(d.pos(root), CodeTooComplex, "spec expands through aliases to more than %d bytes of values (the limit for a spec); refusing to read it", size)
		p.tooComplex = true
		return p, diag.List(d.errs)
	}
	d.mergeKeys(root, map[*yaml.Node]bool{})
	d.pipeline(p, root)
	for _, e := range d.errs {
		p.tooComplex = p.tooComplex || e.Code == CodeTooComplex
	}
	return p, diag.List(d.errs)
}

// mergeKeys applies YAML merge keys (`<<: *defaults`, `<<: [*a, *b]`)
// in place under n: each `<<` pair is replaced by the pairs of the merged
// mappings that the mapping does not set itself, earlier mappings of a
// list winning over later ones, as YAML's merge type says. Merged pairs
// keep their positions (where the anchor defines them). The work is
// bounded: expandedSize has measured the tree with aliases expanded.
func (d *decoder) mergeKeys(n *yaml.Node, done map[*yaml.Node]bool) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || done[n] {
		return
	}
	done[n] = true
	for _, c := range n.Content {
		d.mergeKeys(c, done)
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	isMerge := func(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.Tag == "!!merge" }
	own := map[string]bool{}
	hasMerge := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; isMerge(k) {
			hasMerge = true
		} else if k.Kind == yaml.ScalarNode {
			own[k.Value] = true
		}
	}
	if !hasMerge {
		return
	}
	var out []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMerge(k) {
			out = append(out, k, v)
			continue
		}
		sources := []*yaml.Node{v}
		if r := d.resolve(v); r != nil && r.Kind == yaml.SequenceNode {
			sources = r.Content
		}
		for _, src := range sources {
			m := d.resolve(src)
			if m == nil || m.Kind != yaml.MappingNode {
				d.errs.add(d.pos(src), "<<: a merge key takes a mapping or a list of mappings (usually aliases: <<: *defaults), got %s", describe(src))
				continue
			}
			for j := 0; j+1 < len(m.Content); j += 2 {
				mk := m.Content[j]
				if mk.Kind == yaml.ScalarNode && !own[mk.Value] {
					own[mk.Value] = true
					out = append(out, mk, m.Content[j+1])
				}
			}
		}
	}
	n.Content = out
}

// expandedSize adds up the text of every scalar of the tree under root
// with aliases expanded, stopping once it passes MaxExpandedSize (over is
// then true and size the limit) or has visited maxNodes nodes (the decoder
// reports that).
func expandedSize(root *yaml.Node) (size int, over bool) {
	stack := []*yaml.Node{root}
	for visited := 0; len(stack) > 0 && visited < maxNodes; visited++ {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil {
			continue
		}
		size += len(n.Value)
		if size > MaxExpandedSize {
			return MaxExpandedSize, true
		}
		stack = append(stack, n.Content...)
	}
	return size, false
}

// binaryAt returns the offset of the first byte that cannot be in a YAML
// text: a NUL or invalid UTF-8.
func binaryAt(data []byte) (int, bool) {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == 0 || (r == utf8.RuneError && size == 1) {
			return i, true
		}
		i += size
	}
	return 0, false
}

type decoder struct {
	file  string
	errs  problems
	nodes int
}

func (d *decoder) pos(n *yaml.Node) Pos {
	return Pos{File: d.file, Line: n.Line, Col: n.Column}
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError reports a yaml.v3 error, which names a line but no column.
func (d *decoder) syntaxError(err error) {
	msg := err.Error()
	pos := Pos{File: d.file}
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		pos.Line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	d.errs.addCode(pos, CodeSyntax, "yaml: %s", msg)
}

// resolve follows aliases and counts nodes, so that an alias bomb (aliases
// of aliases expanding exponentially) stops with an error instead of eating
// memory. It returns nil once the budget is spent.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.nodes++
	if d.nodes == maxNodes {
		d.errs.addCode(d.pos(n), CodeTooComplex, "spec expands to more than %d YAML nodes (aliases of aliases?); refusing to read further", maxNodes)
	}
	if d.nodes >= maxNodes {
		return nil
	}
	return n
}

// mapping iterates over a mapping's pairs, reporting non-mappings, non-string
// and duplicate keys, and unknown keys when known is non-nil.
func (d *decoder) mapping(n *yaml.Node, what string, known []string, fn func(key string, k, v *yaml.Node)) {
	if n = d.resolve(n); n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errs.add(d.pos(n), "%s: expected a mapping, got %s", what, describe(n))
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k = d.resolve(k); k == nil {
			return
		}
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			d.errs.add(d.pos(k), "%s: keys must be plain strings", what)
			continue
		}
		if seen[k.Value] {
			d.errs.add(d.pos(k), "%s: duplicate key %q", what, k.Value)
			continue
		}
		seen[k.Value] = true
		if known != nil && !contains(known, k.Value) {
			d.errs.add(d.pos(k), "%s: unknown key %q%s", what, k.Value, diag.Suggest(k.Value, known))
			continue
		}
		fn(k.Value, k, v)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// describe names a node's kind for messages: "a string", "a list", ...
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("the string %q", truncate(n.Value, 40))
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "nothing (null)"
		}
		return fmt.Sprintf("%q", truncate(n.Value, 40))
	}
	return "an alias"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	if n = d.resolve(n); n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.errs.add(d.pos(n), "%s: expected a string, got %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) integer(n *yaml.Node, what string) (int, bool) {
	if n = d.resolve(n); n == nil {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.errs.add(d.pos(n), "%s: expected an integer, got %s", what, describe(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v > 1<<31 || v < -(1<<31) {
		d.errs.add(d.pos(n), "%s: integer %s out of range", what, n.Value)
		return 0, false
	}
	return int(v), true
}

func (d *decoder) duration(n *yaml.Node, what string) (time.Duration, bool) {
	s, ok := d.str(n, what)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.errs.add(d.pos(n), "%s: %q is not a positive duration (examples: 90s, 10m, 1h30m)", what, s)
		return 0, false
	}
	return v, true
}

// envNameRe is an environment variable name a shell can use; a name with
// "=" would set another variable than the one named.
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envMap decodes an env block: names as envNameRe says, string values.
func (d *decoder) envMap(n *yaml.Node, what string) map[string]string {
	out := map[string]string{}
	d.mapping(n, what, nil, func(key string, k, v *yaml.Node) {
		if !envNameRe.MatchString(key) {
			d.errs.add(d.pos(k), "%s: %q is not a variable name: use letters, digits and _, not starting with a digit", what, truncate(key, 40))
			return
		}
		if v = d.resolve(v); v == nil {
			return
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			d.errs.add(d.pos(v), "%s.%s: expected a string, got %s", what, key, describe(v))
			return
		}
		out[key] = v.Value
	})
	return out
}

func (d *decoder) pipeline(p *Pipeline, root *yaml.Node) {
	if r := d.resolve(root); r != nil && r.Kind == yaml.ScalarNode && r.Tag == "!!null" {
		d.errs.addCode(Pos{File: d.file, Line: 1, Col: 1}, CodeEmpty, "empty spec: expected a mapping with version, name and stages")
		return
	}
	var haveVersion, haveName, haveStages bool
	d.mapping(root, "spec", pipelineKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "version":
			haveVersion = true
			if n, ok := d.integer(v, "version"); ok && n != SupportedVersion {
				d.errs.add(d.pos(v), "version: unsupported spec version %d (this mspipe reads version %d)", n, SupportedVersion)
			} else if ok {
				p.Version = n
			}
		case "name":
			haveName = true
			if s, ok := d.str(v, "name"); ok {
				if strings.TrimSpace(s) == "" {
					d.errs.add(d.pos(v), "name: must not be empty")
				}
				p.Name = s
			}
		case "description":
			p.Description, _ = d.str(v, "description")
		case "params":
			d.params(p, v)
		case "cluster":
			p.Cluster = d.cluster(v, "cluster")
		case "env":
			p.Env = d.envMap(v, "env")
		case "stages":
			haveStages = true
			d.stages(p, v)
		}
	})
	if r := d.resolve(root); r == nil || r.Kind != yaml.MappingNode {
		return
	}
	top := Pos{File: d.file, Line: root.Line, Col: root.Column}
	if !haveVersion {
		d.errs.add(top, "spec: missing required key \"version\" (add `version: %d`)", SupportedVersion)
	}
	if !haveName {
		d.errs.add(top, "spec: missing required key \"name\"")
	}
	if !haveStages {
		d.errs.add(top, "spec: missing required key \"stages\"")
	}
}

func (d *decoder) params(p *Pipeline, n *yaml.Node) {
	d.mapping(n, "params", nil, func(name string, k, v *yaml.Node) {
		what := "params." + name
		if !identRe.MatchString(name) {
			d.errs.add(d.pos(k), "%s: a param name must be letters, digits and _ (it is used as params.%s in expressions)", what, name)
			return
		}
		prm := &Param{Name: name, Pos: d.pos(k)}
		var haveType bool
		var def *yaml.Node
		d.mapping(v, what, paramKeys, func(key string, kk, vv *yaml.Node) {
			switch key {
			case "type":
				haveType = true
				if s, ok := d.str(vv, what+".type"); ok {
					if !contains(paramTypes, s) {
						d.errs.add(d.pos(vv), "%s.type: unknown type %q (one of %s)%s", what, s, strings.Join(paramTypes, ", "), diag.Suggest(s, paramTypes))
					} else {
						prm.Type = Type(s)
					}
				}
			case "default":
				def = vv
			case "description":
				prm.Description, _ = d.str(vv, what+".description")
			}
		})
		if r := d.resolve(v); r != nil && r.Kind == yaml.MappingNode && !haveType {
			d.errs.add(d.pos(k), "%s: missing required key \"type\"", what)
		}
		if def != nil && prm.Type != "" {
			if val, err := d.typedValue(def, prm.Type, 0); err != nil {
				d.errs.add(d.pos(def), "%s.default: %v", what, err)
			} else {
				prm.Default = val
			}
		}
		p.Params = append(p.Params, prm)
	})
}

// typedValue converts a YAML value to the Go value of a param type: int,
// float64, string, bool, []any or map[string]any.
func (d *decoder) typedValue(n *yaml.Node, t Type, depth int) (any, error) {
	if n = d.resolve(n); n == nil {
		return nil, errors.New("too many nodes")
	}
	v, err := d.plainValue(n, depth)
	if err != nil {
		return nil, err
	}
	out, err := ConvertValue(v, t)
	if err != nil {
		return nil, fmt.Errorf("%w, got %s", err, describe(n))
	}
	return out, nil
}

// plainValue converts a YAML node to plain Go data (JSON-compatible).
func (d *decoder) plainValue(n *yaml.Node, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	if n = d.resolve(n); n == nil {
		return nil, errors.New("too many nodes")
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return scalarValue(n)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := d.plainValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := d.resolve(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				return nil, errors.New("mapping keys must be strings")
			}
			v, err := d.plainValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported YAML node")
}

// scalarValue converts a YAML scalar by its resolved tag.
func scalarValue(n *yaml.Node) (any, error) {
	switch n.Tag {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, err
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return nil, fmt.Errorf("integer %s out of range", n.Value)
		}
		return int(i), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		return f, nil
	case "!!str", "!!binary", "!!timestamp":
		return n.Value, nil
	}
	return n.Value, nil
}

func (d *decoder) cluster(n *yaml.Node, what string) *Cluster {
	c := &Cluster{Pos: d.pos(n)}
	d.mapping(n, what, clusterKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "devices":
			c.DevicesPos = d.pos(v)
			if r := d.resolve(v); r != nil && r.Kind == yaml.ScalarNode && r.Tag == "!!str" && strings.Contains(r.Value, "${{") {
				c.DevicesExpr = d.template(r, what+".devices")
				return
			}
			if n, ok := d.integer(v, what+".devices"); ok {
				if n < 1 {
					d.errs.add(d.pos(v), "%s.devices: must be at least 1, got %d", what, n)
				} else if err := CheckDeviceCount(n); err != nil {
					d.errs.add(d.pos(v), "%s.devices: %v", what, err)
				}
				c.Devices = n
			}
		case "rank_table":
			c.TablePos = d.pos(v)
			if s, ok := d.str(v, what+".rank_table"); ok {
				if s == "" {
					d.errs.add(d.pos(v), "%s.rank_table: must not be empty", what)
				}
				c.RankTable = s
			}
		}
	})
	if c.Devices == 0 && c.DevicesExpr == nil && c.RankTable == "" {
		if r := d.resolve(n); r != nil && r.Kind == yaml.MappingNode {
			d.errs.add(d.pos(n), "%s: give devices (local simulated devices) or rank_table (a rank table file)", what)
		}
	}
	return c
}

// CheckDeviceCount applies the rules for a cluster given by a device count
// (ranktable.CheckDeviceCount: HCCL's host sizes, and the most devices this
// machine can simulate). It is the one check: validate, the resolver and
// the launcher all use it, so validate can never pass what run refuses.
func CheckDeviceCount(n int) error { return ranktable.CheckDeviceCount(n) }

func (d *decoder) stages(p *Pipeline, n *yaml.Node) {
	if r := d.resolve(n); r != nil && r.Kind == yaml.MappingNode && len(r.Content) == 0 {
		d.errs.add(d.pos(r), "stages: a pipeline needs at least one stage")
		return
	}
	d.mapping(n, "stages", nil, func(id string, k, v *yaml.Node) {
		what := "stages." + id
		if !identRe.MatchString(id) {
			d.errs.add(d.pos(k), "%s: a stage id must be letters, digits and _ (it is used as stages.%s in expressions)", what, id)
		}
		s := &Stage{ID: id, Pos: d.pos(k), NeedsPos: map[string]Pos{}, keyPos: map[string]Pos{}, badTemplates: map[*yaml.Node]bool{}, Retry: Retry{MaxAttempts: 1}}
		var haveUses bool
		d.mapping(v, what, stageKeys, func(key string, kk, vv *yaml.Node) {
			s.keyPos[key] = d.pos(kk)
			switch key {
			case "uses":
				haveUses = true
				s.UsesPos = d.pos(vv)
				if u, ok := d.str(vv, what+".uses"); ok {
					if !usesRe.MatchString(u) {
						d.errs.add(d.pos(vv), "%s.uses: %q is neither a stage name (like cifar/prepare) nor a path to a plugin binary (like ./plugins/mspipe-stage-x)", what, u)
					}
					s.Uses = u
				}
			case "description":
				s.Description, _ = d.str(vv, what+".description")
			case "with":
				d.with(s, vv, what)
			case "needs":
				d.needs(s, vv, what)
			case "if":
				if r := d.resolve(vv); r != nil && r.Kind == yaml.ScalarNode && r.Tag == "!!bool" {
					d.errs.add(d.pos(r), "%s.if: write the condition as an expression, for example \"${{ params.x > 1 }}\"; a constant %s is not allowed", what, r.Value)
					return
				}
				if cond, ok := d.str(vv, what+".if"); ok {
					var t *Template
					if n := d.resolve(vv); !strings.Contains(cond, "${{") && strings.TrimSpace(cond) != "" {
						// As in GitHub Actions, a condition may omit ${{ }}: `if: failure()`.
						lead := len(cond) - len(strings.TrimLeft(cond, " \t"))
						t = &Template{Raw: cond, Pos: d.pos(n), what: what + ".if", node: n,
							Parts: []TemplatePart{{Expr: strings.TrimSpace(cond), Pos: exprPos(n, d.file, lead)}}}
					} else {
						t = d.template(n, what+".if")
					}
					if t != nil && !t.Whole() {
						d.errs.add(d.pos(vv), "%s.if: must be a single expression \"${{ ... }}\", got %q", what, truncate(cond, 60))
					} else {
						s.If = t
					}
				}
			case "cluster":
				s.Cluster = d.cluster(vv, what+".cluster")
			case "timeout":
				s.Timeout, _ = d.duration(vv, what+".timeout")
			case "retry":
				d.retry(s, vv, what+".retry")
			case "limits":
				d.limits(s, vv, what+".limits")
			case "outputs":
				d.outputs(s, vv, what+".outputs")
			case "env":
				s.Env = d.envMap(vv, what+".env")
			case "sha256":
				if h, ok := d.str(vv, what+".sha256"); ok {
					if !sha256Re.MatchString(h) {
						d.errs.add(d.pos(vv), "%s.sha256: expected 64 lower-case hex digits, got %q", what, truncate(h, 70))
					}
					s.SHA256 = h
				}
			}
		})
		if r := d.resolve(v); r != nil && r.Kind == yaml.MappingNode && !haveUses {
			d.errs.add(d.pos(k), "%s: missing required key \"uses\"", what)
		}
		p.Stages = append(p.Stages, s)
	})
}

func (d *decoder) needs(s *Stage, n *yaml.Node, what string) {
	if n = d.resolve(n); n == nil {
		return
	}
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	for _, it := range items {
		id, ok := d.str(it, what+".needs")
		if !ok {
			continue
		}
		if _, dup := s.NeedsPos[id]; dup {
			d.errs.add(d.pos(it), "%s.needs: %q is listed twice", what, id)
			continue
		}
		s.Needs = append(s.Needs, id)
		s.NeedsPos[id] = d.pos(it)
	}
}

func (d *decoder) retry(s *Stage, n *yaml.Node, what string) {
	r := d.resolve(n)
	if r == nil {
		return
	}
	if r.Kind == yaml.ScalarNode {
		if v, ok := d.integer(r, what); ok {
			if v < 1 || v > 100 {
				d.errs.add(d.pos(r), "%s: max attempts must be between 1 and 100, got %d", what, v)
				return
			}
			s.Retry.MaxAttempts = v
		}
		return
	}
	d.mapping(r, what, retryKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "max_attempts":
			if a, ok := d.integer(v, what+".max_attempts"); ok {
				if a < 1 || a > 100 {
					d.errs.add(d.pos(v), "%s.max_attempts: must be between 1 and 100, got %d", what, a)
					return
				}
				s.Retry.MaxAttempts = a
			}
		case "backoff":
			s.Retry.Backoff, _ = d.duration(v, what+".backoff")
		}
	})
}

func (d *decoder) limits(s *Stage, n *yaml.Node, what string) {
	d.mapping(n, what, limitsKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "memory":
			s.Limits.MemoryPos = d.pos(v)
			if r := d.resolve(v); r != nil && r.Kind == yaml.ScalarNode && r.Tag == "!!int" {
				d.errs.add(d.pos(r), "%s.memory: give a unit, for example %sMiB (a bare number would be bytes)", what, r.Value)
				return
			}
			text, ok := d.str(v, what+".memory")
			if !ok {
				return
			}
			size, err := bytesize.Parse(text)
			switch {
			case memoryTooLarge(text, size, err):
				d.errs.add(d.pos(v), "%s.memory: %s is too large: at most %s (more than a machine has)", what, truncate(text, 40), bytesize.Format(MaxMemoryLimit))
			case err != nil || !memoryRe.MatchString(text):
				d.errs.add(d.pos(v), "%s.memory: %q is not a size with a unit, such as 512MiB or 2GiB", what, truncate(text, 40))
			case size < MinMemoryLimit:
				d.errs.add(d.pos(v), "%s.memory: %s is below the smallest limit, %s (a plugin process holds about 150 MiB of data segment at rest)", what, bytesize.Format(size), bytesize.Format(MinMemoryLimit))
			default:
				s.Limits.Memory = size
			}
		}
	})
}

func (d *decoder) outputs(s *Stage, n *yaml.Node, what string) {
	d.mapping(n, what, nil, func(name string, k, v *yaml.Node) {
		if !identRe.MatchString(name) {
			d.errs.add(d.pos(k), "%s.%s: an output name must be letters, digits and _", what, name)
			return
		}
		o := OutputDecl{Name: name, Pos: d.pos(k)}
		setType := func(n *yaml.Node) {
			if t, ok := d.str(n, what+"."+name+".type"); ok {
				if !contains(outputTypes, t) {
					d.errs.add(d.pos(n), "%s.%s: unknown type %q (one of %s)%s", what, name, t, strings.Join(outputTypes, ", "), diag.Suggest(t, outputTypes))
					return
				}
				o.Type = Type(t)
			}
		}
		if r := d.resolve(v); r != nil && r.Kind == yaml.ScalarNode {
			setType(r) // short form: `loss: float`
		} else {
			d.mapping(v, what+"."+name, outputKeys, func(key string, kk, vv *yaml.Node) {
				switch key {
				case "type":
					setType(vv)
				case "description":
					o.Description, _ = d.str(vv, what+"."+name+".description")
				}
			})
		}
		if o.Type == "" {
			o.Type = TypeAny
		}
		s.Outputs = append(s.Outputs, o)
	})
}

// with checks the shape of a stage's inputs and collects their templates.
func (d *decoder) with(s *Stage, n *yaml.Node, what string) {
	r := d.resolve(n)
	if r == nil {
		return
	}
	if r.Kind != yaml.MappingNode {
		if r.Kind == yaml.ScalarNode && r.Tag == "!!null" {
			return
		}
		d.errs.add(d.pos(r), "%s.with: expected a mapping of inputs, got %s", what, describe(r))
		return
	}
	s.With = r
	d.walkWith(s, r, what+".with", 0)
}

func (d *decoder) walkWith(s *Stage, n *yaml.Node, what string, depth int) {
	if depth > maxDepth {
		d.errs.addCode(d.pos(n), CodeTooComplex, "%s: nested deeper than %d levels", truncate(what, 60), maxDepth)
		return
	}
	if n = d.resolve(n); n == nil {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		d.mapping(n, what, nil, func(key string, k, v *yaml.Node) {
			d.walkWith(s, v, what+"."+key, depth+1)
		})
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.walkWith(s, c, fmt.Sprintf("%s[%d]", what, i), depth+1)
		}
	case yaml.ScalarNode:
		if n.Tag == "!!str" && strings.Contains(n.Value, "${{") {
			if t := d.template(n, what); t != nil {
				s.Templates = append(s.Templates, t)
			} else {
				s.badTemplates[n] = true
			}
		}
	}
}
