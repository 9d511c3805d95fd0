package spec

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
)

// FormatPath is the JSON Schema "format" a stage gives a `with` property
// that names a file or directory it reads. mspipe makes a relative value
// of such a property absolute against the spec's directory before the
// stage, its ranks or the cache see it: the one rule for paths written in
// a spec, wherever the stage runs.
const FormatPath = "path"

// PathInputs returns, sorted, the top-level `with` properties that a
// stage's schema marks with format "path". A schema that cannot be read
// has none (compiling it reports why).
func PathInputs(info *StageInfo) []string {
	if info == nil || info.WithSchema == nil {
		return nil
	}
	var doc struct {
		Properties map[string]struct {
			Format string `json:"format"`
		} `json:"properties"`
	}
	if json.Unmarshal(info.WithSchema, &doc) != nil {
		return nil
	}
	var names []string
	for name, prop := range doc.Properties {
		if prop.Format == FormatPath {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// absPaths makes every relative, non-empty string value of the named
// properties of with absolute against base, in place.
func absPaths(with map[string]any, names []string, base string) {
	for _, name := range names {
		if v, ok := with[name].(string); ok && v != "" && !filepath.IsAbs(v) {
			with[name] = filepath.Join(base, v)
		}
	}
}

// AbsPaths makes the path inputs (see FormatPath) of a stage's resolved
// `with` absolute against the spec's directory, in place, and returns
// with. The pipeline's BaseDir must be absolute (the engine makes it so).
func (r *Resolver) AbsPaths(s *Stage, with map[string]any) (map[string]any, error) {
	names := PathInputs(r.infos[s.ID])
	if len(names) == 0 {
		return with, nil
	}
	if !filepath.IsAbs(r.p.BaseDir) {
		return nil, fmt.Errorf("stages.%s: spec directory %q is not absolute", s.ID, r.p.BaseDir)
	}
	absPaths(with, names, r.p.BaseDir)
	return with, nil
}

// AbsParams returns params with every relative value of a path param made
// absolute against the spec's directory (which must be absolute); other
// values are kept. Command-line values should be made absolute against
// the working directory before this, as any command-line path is.
func AbsParams(p *Pipeline, params map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(params))
	for k, v := range params {
		out[k] = v
	}
	for _, prm := range p.Params {
		v, ok := out[prm.Name].(string)
		if prm.Type != TypePath || !ok || v == "" || filepath.IsAbs(v) {
			continue
		}
		if !filepath.IsAbs(p.BaseDir) {
			return nil, fmt.Errorf("param %s: spec directory %q is not absolute", prm.Name, p.BaseDir)
		}
		out[prm.Name] = filepath.Join(p.BaseDir, v)
	}
	return out, nil
}
