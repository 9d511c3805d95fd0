package ranktable

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/mspipe/mspipe/internal/diag"
	"github.com/mspipe/mspipe/internal/userfile"
)

// MaxFileSize caps the size of a rank table file. Load refuses larger files
// without reading them; Parse reports them as a problem.
const MaxFileSize = 16 << 20

// maxDepth caps JSON nesting. A rank table nests five levels (table,
// server_list, server, device list, device); anything far deeper is not a
// rank table, and the cap keeps hostile input from costing memory.
const maxDepth = 32

// Load reads and checks the rank table at path: it parses the file and, when
// the JSON has the table's shape, validates it against HCCL's rules. The
// error is non-nil only when the file cannot be read (missing, a directory,
// larger than MaxFileSize); everything wrong with the content is a diagnostic.
// The table is nil when the content is not a JSON object at all.
func Load(path string) (*RankTable, diag.List, error) {
	// A regular file only: a FIFO would block the open, a device the read.
	f, info, err := userfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read rank table %s: %w", path, err)
	}
	defer f.Close()
	if info.Size() > MaxFileSize {
		return nil, nil, fmt.Errorf("read rank table %s: %w: %d bytes, the limit is %d MiB", path, ErrTooLarge, info.Size(), MaxFileSize>>20)
	}
	// The size can change after Stat, and special files report 0: read at
	// most one byte past the limit to tell.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read rank table %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, nil, fmt.Errorf("read rank table %s: %w: more than %d MiB", path, ErrTooLarge, MaxFileSize>>20)
	}
	t, problems := Check(path, data)
	return t, problems, nil
}

// Check parses data and, if it has the shape of a rank table, validates it.
// name is the file name problems are reported under.
func Check(name string, data []byte) (*RankTable, diag.List) {
	t, problems := Parse(name, data)
	if t != nil {
		problems = append(problems, t.Validate()...)
		problems.Sort()
	}
	return t, problems
}

// Parse decodes a rank table and records the position of every value. It
// reports syntax errors, values of the wrong JSON type, missing and unknown
// keys; HCCL's rules are left to Validate. The table is nil when data is not
// a JSON object; otherwise it holds everything that could be decoded, so
// Validate can still report the remaining problems in one pass.
func Parse(name string, data []byte) (*RankTable, diag.List) {
	p := &parser{file: name, data: data, loc: diag.NewLocator(data)}
	root := p.tree()
	var t *RankTable
	if root != nil {
		t = p.build(root)
	}
	p.problems.Sort()
	return t, p.problems
}

type kind uint8

const (
	kindObject kind = iota + 1
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

// node is a decoded JSON value with the offset of its first byte.
type node struct {
	kind    kind
	off     int
	text    string // string value, number literal, "true" or "false"
	members []member
	elems   []*node
}

type member struct {
	key    string
	keyOff int
	val    *node
}

func (n *node) describe() string {
	switch n.kind {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	default:
		return "null"
	}
}

type parser struct {
	file     string
	data     []byte
	loc      *diag.Locator
	problems diag.List
}

// position converts a byte offset into a line and column.
func (p *parser) position(off int) Pos {
	line, col := p.loc.Position(off)
	return Pos{Offset: off, Line: line, Col: col}
}

func (p *parser) report(sev diag.Severity, code string, off int, format string, args ...any) {
	pos := p.position(off)
	p.problems = append(p.problems, diag.Diagnostic{
		File: p.file, Line: pos.Line, Column: pos.Col, Severity: sev, Code: code, Message: fmt.Sprintf(format, args...),
	})
}

func (p *parser) errorf(off int, format string, args ...any) {
	p.report(diag.Error, "", off, format, args...)
}

// tree decodes p.data into nodes, or reports why it cannot and returns nil.
func (p *parser) tree() *node {
	data := p.data
	switch {
	case len(data) > MaxFileSize:
		p.errorf(0, "file is %d bytes, larger than the %d MiB limit for a rank table", len(data), MaxFileSize>>20)
		return nil
	case len(data) == 0:
		p.errorf(0, "empty file: a rank table is a JSON object")
		return nil
	case bytes.HasPrefix(data, []byte("\xef\xbb\xbf")):
		p.errorf(0, "file starts with a UTF-8 byte order mark, which JSON does not allow; save it without one")
		return nil
	}
	if off, b, ok := firstBinaryByte(data); ok {
		if b == 0 {
			p.errorf(off, "not a text file: NUL byte (a rank table is UTF-8 JSON)")
		} else {
			p.errorf(off, "not a text file: invalid UTF-8 byte 0x%02x (a rank table is UTF-8 JSON)", b)
		}
		return nil
	}
	if diag.SkipJSONSpace(data, 0) == len(data) {
		p.errorf(len(data), "no JSON value: the file holds only whitespace; a rank table is a JSON object")
		return nil
	}
	d := &decoder{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	d.dec.UseNumber()
	root, err := d.value(0)
	if err == nil && diag.SkipJSONSpace(data, int(d.dec.InputOffset())) < len(data) {
		err = errors.New("trailing data") // diag.JSONSyntaxError names it
	}
	if err != nil {
		var de *depthError
		if errors.As(err, &de) {
			p.errorf(de.off, "JSON nested more than %d levels deep; a rank table nests 5", maxDepth)
			return nil
		}
		if off, msg, found := diag.JSONSyntaxError(data); found {
			p.report(diag.Error, CodeSyntax, off, "%s", msg)
		} else {
			// Unreachable while the scanner agrees with encoding/json (a fuzz
			// test checks that); keep the decoder's own words just in case.
			off := len(data)
			var se *json.SyntaxError
			if errors.As(err, &se) {
				off = min(int(se.Offset), len(data))
			}
			p.report(diag.Error, CodeSyntax, off, "syntax error: %v", err)
		}
		return nil
	}
	return root
}

// firstBinaryByte finds a NUL byte or invalid UTF-8, which no JSON text file
// contains.
func firstBinaryByte(data []byte) (off int, b byte, found bool) {
	for i := 0; i < len(data); {
		c := data[i]
		if c == 0 {
			return i, 0, true
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i, c, true
		}
		i += size
	}
	return 0, 0, false
}

// decoder builds nodes from the json.Decoder token stream, taking each
// token's start offset from the decoder's input offset.
type decoder struct {
	data []byte
	dec  *json.Decoder
}

type depthError struct{ off int }

func (e *depthError) Error() string { return fmt.Sprintf("nesting too deep at offset %d", e.off) }

// next returns the next token and the offset of its first byte. Between the
// end of the previous token (InputOffset) and this one there is only
// whitespace and at most one ',' or ':' in valid JSON.
func (d *decoder) next() (json.Token, int, error) {
	prev := int(d.dec.InputOffset())
	tok, err := d.dec.Token()
	if err != nil {
		return nil, 0, err
	}
	i := diag.SkipJSONSpace(d.data, prev)
	if i < len(d.data) && (d.data[i] == ',' || d.data[i] == ':') {
		i = diag.SkipJSONSpace(d.data, i+1)
	}
	return tok, i, nil
}

func (d *decoder) value(depth int) (*node, error) {
	tok, off, err := d.next()
	if err != nil {
		return nil, err
	}
	return d.valueFrom(tok, off, depth)
}

func (d *decoder) valueFrom(tok json.Token, off, depth int) (*node, error) {
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return nil, &depthError{off: off}
		}
		switch t {
		case '{':
			n := &node{kind: kindObject, off: off}
			for {
				tok, keyOff, err := d.next()
				if err != nil {
					return nil, err
				}
				if tok == json.Delim('}') {
					return n, nil
				}
				key, ok := tok.(string)
				if !ok {
					return nil, fmt.Errorf("object key is %T", tok)
				}
				val, err := d.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, member{key: key, keyOff: keyOff, val: val})
			}
		case '[':
			n := &node{kind: kindArray, off: off}
			for {
				tok, elemOff, err := d.next()
				if err != nil {
					return nil, err
				}
				if tok == json.Delim(']') {
					return n, nil
				}
				val, err := d.valueFrom(tok, elemOff, depth+1)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, val)
			}
		}
		return nil, fmt.Errorf("unexpected delimiter %v", t)
	case string:
		return &node{kind: kindString, off: off, text: t}, nil
	case json.Number:
		return &node{kind: kindNumber, off: off, text: string(t)}, nil
	case bool:
		return &node{kind: kindBool, off: off, text: fmt.Sprint(t)}, nil
	case nil:
		return &node{kind: kindNull, off: off}, nil
	}
	return nil, fmt.Errorf("unexpected token %T", tok)
}

// Keys of each object level, in the seeds' order.
func tableKeys() []string  { return []string{"version", "server_count", "server_list", "status"} }
func serverKeys() []string { return []string{"server_id", "device", "host_nic_ip"} }
func deviceKeys() []string { return []string{"device_id", "device_ip", "rank_id"} }

// build turns the node tree into a RankTable, reporting shape problems.
func (p *parser) build(root *node) *RankTable {
	if root.kind != kindObject {
		p.errorf(root.off, "the top-level value is %s; a rank table is a JSON object", root.describe())
		return nil
	}
	t := &RankTable{pos: map[string]Pos{}, bad: map[string]bool{}, file: p.file}
	b := &builder{p: p, t: t}
	t.pos[""] = p.position(root.off)
	fields := b.fields(root, "", "the rank table", tableKeys())
	t.Version = b.str(fields, root, "", "version", diag.Error)
	t.ServerCount = b.str(fields, root, "", "server_count", diag.Error)
	if list := b.array(fields, root, "", "server_list"); list != nil {
		t.ServerList = make([]Server, len(list.elems))
		for i, e := range list.elems {
			t.ServerList[i] = b.server(e, serverPath(i))
		}
	}
	t.Status = b.str(fields, root, "", "status", diag.Error)
	return t
}

type builder struct {
	p *parser
	t *RankTable
}

func (b *builder) server(n *node, path string) Server {
	var s Server
	if !b.object(n, path) {
		return s
	}
	fields := b.fields(n, path, "a server object", serverKeys())
	s.ServerID = b.str(fields, n, path, "server_id", diag.Error)
	if list := b.array(fields, n, path, "device"); list != nil {
		s.Device = make([]Device, len(list.elems))
		for j, e := range list.elems {
			s.Device[j] = b.device(e, path+".device["+fmt.Sprint(j)+"]")
		}
	}
	// The seeds always write "host_nic_ip": "reserve"; a table without it
	// is unusual but carries no information HCCL's version 1.0 needs.
	s.HostNicIP = b.str(fields, n, path, "host_nic_ip", diag.Warning)
	return s
}

func (b *builder) device(n *node, path string) Device {
	var d Device
	if !b.object(n, path) {
		return d
	}
	fields := b.fields(n, path, "a device object", deviceKeys())
	d.DeviceID = b.str(fields, n, path, "device_id", diag.Error)
	d.DeviceIP = b.str(fields, n, path, "device_ip", diag.Error)
	d.RankID = b.str(fields, n, path, "rank_id", diag.Error)
	return d
}

// object records n's position and reports whether it is a JSON object.
func (b *builder) object(n *node, path string) bool {
	b.t.pos[path] = b.p.position(n.off)
	if n.kind != kindObject {
		b.p.errorf(n.off, "%s must be an object, not %s", path, n.describe())
		b.t.bad[path] = true
		return false
	}
	return true
}

// fields indexes obj's members by key, reporting duplicate and unknown keys.
// The first occurrence of a duplicate key wins.
func (b *builder) fields(obj *node, path, what string, known []string) map[string]member {
	fields := make(map[string]member, len(obj.members))
	for _, m := range obj.members {
		if first, dup := fields[m.key]; dup {
			b.p.errorf(m.keyOff, "duplicate key %q (first at %s)", m.key, b.p.position(first.keyOff))
			continue
		}
		fields[m.key] = m
		if !slices.Contains(known, m.key) {
			b.p.errorf(m.keyOff, "unknown key %q in %s%s", m.key, what, suggest(m.key, known))
		}
	}
	return fields
}

// str returns the string value of key in obj. A missing key is reported with
// severity sev; a number is an error but its literal is kept so validation
// can go on; any other type is an error and marks the path bad.
func (b *builder) str(fields map[string]member, obj *node, path, key string, sev diag.Severity) string {
	kp := join(path, key)
	m, ok := fields[key]
	if !ok {
		b.t.bad[kp] = true
		if sev == diag.Warning {
			b.p.report(sev, "", obj.off, "missing key %q (the seeds set it to \"reserve\")", key)
		} else {
			b.p.errorf(obj.off, "missing key %q", key)
		}
		return ""
	}
	b.t.pos[kp] = b.p.position(m.val.off)
	switch m.val.kind {
	case kindString:
		return m.val.text
	case kindNumber:
		b.p.errorf(m.val.off, "%s must be a JSON string: write %s, not %s (rank tables quote every value)", key, quote(m.val.text), m.val.text)
		return m.val.text
	default:
		b.t.bad[kp] = true
		b.p.errorf(m.val.off, "%s must be a JSON string, not %s", key, m.val.describe())
		return ""
	}
}

// array returns the array node of key in obj, or nil after reporting why not.
func (b *builder) array(fields map[string]member, obj *node, path, key string) *node {
	kp := join(path, key)
	m, ok := fields[key]
	if !ok {
		b.t.bad[kp] = true
		b.p.errorf(obj.off, "missing key %q", key)
		return nil
	}
	b.t.pos[kp] = b.p.position(m.val.off)
	if m.val.kind != kindArray {
		b.t.bad[kp] = true
		b.p.errorf(m.val.off, "%s must be an array, not %s", key, m.val.describe())
		return nil
	}
	return m.val
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest names the object a key from another level belongs in, or
// proposes the known key closest to a misspelled one (diag.Suggest).
func suggest(key string, known []string) string {
	for _, level := range []struct {
		what string
		keys []string
	}{{"the top level", tableKeys()}, {"a server object", serverKeys()}, {"a device object", deviceKeys()}} {
		if !slices.Equal(level.keys, known) && slices.Contains(level.keys, key) {
			return fmt.Sprintf(" (%q belongs in %s)", key, level.what)
		}
	}
	return diag.Suggest(key, known)
}
