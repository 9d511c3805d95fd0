package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/spec"
)

// cacheKeyInput is everything that determines a stage's outputs. It is
// hashed as canonical JSON (encoding/json sorts map keys).
type cacheKeyInput struct {
	Plugin    string            `json:"plugin"` // name, version and binary digest
	With      map[string]any    `json:"with"`
	Devices   int               `json:"devices"`
	RankTable string            `json:"rank_table,omitempty"` // content hash of the rank table file
	Env       map[string]string `json:"env,omitempty"`
	Inputs    map[string]string `json:"inputs,omitempty"` // "<stage>.<output>" -> content hash of upstream path outputs
}

func cacheKey(in cacheKeyInput) (string, error) {
	data, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// hashPath returns the SHA-256 of a file, or of a directory tree (relative
// names and contents of its regular files, in sorted order), so a path's
// identity is its content, not its name or mtime. Only regular files are
// read: a device, FIFO or socket (named directly or found in the tree) is
// refused with an error naming it, since reading one may never end
// (/dev/zero) or block forever (a FIFO without a writer). Symbolic links
// inside a tree are not followed. Hashing stops when ctx is done.
func hashPath(ctx context.Context, path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if !st.IsDir() {
		if err := hashFile(ctx, h, path); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch t := d.Type(); {
		case t.IsRegular():
			files = append(files, p)
		case t&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0:
			return fmt.Errorf("%s is %s, %w", p, fileKind(t), userfile.ErrNotRegular)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		rel, _ := filepath.Rel(path, f)
		fmt.Fprintf(h, "%s\x00", filepath.ToSlash(rel))
		if err := hashFile(ctx, h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile writes the content of the regular file at path and its length
// to w.
func hashFile(ctx context.Context, w io.Writer, path string) error {
	f, _, err := userfile.Open(path)
	if errors.Is(err, userfile.ErrNotRegular) {
		return fmt.Errorf("%s %w", path, err)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := userfile.Copy(ctx, w, f)
	if err != nil {
		return fmt.Errorf("hash %s: %w", path, err)
	}
	fmt.Fprintf(w, "\x00%d\x00", n)
	return nil
}

// fileKind names the type of a special file for messages.
func fileKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	}
	return "a device"
}

// cacheKey computes the stage's cache key from its plugin identity,
// resolved inputs, cluster (device count and rank table content),
// environment (pipeline's and stage's) and the content of every path
// output of the stages it depends on, and of path params.
func (r *runner) cacheKey(ctx context.Context, s *spec.Stage, sc *spec.Scope, ident string, with map[string]any) (string, error) {
	in, err := r.cacheKeyInput(ctx, s, sc, ident, with)
	if err != nil {
		return "", err
	}
	return cacheKey(in)
}

// cacheKeyInput gathers what cacheKey hashes.
func (r *runner) cacheKeyInput(ctx context.Context, s *spec.Stage, sc *spec.Scope, ident string, with map[string]any) (cacheKeyInput, error) {
	in := cacheKeyInput{Plugin: ident, With: with, Devices: sc.Cluster.Devices, Inputs: map[string]string{}}
	if sc.Cluster.RankTable != "" {
		h, err := hashPath(ctx, sc.Cluster.RankTable)
		if err != nil {
			return in, fmt.Errorf("rank table: %w", err)
		}
		in.RankTable = h
	}
	in.Env = map[string]string{}
	for k, v := range r.p.Env {
		in.Env[k] = v
	}
	for k, v := range s.Env {
		in.Env[k] = v
	}
	// Paths already keyed by content: upstream path outputs.
	var keyed []string
	r.mu.Lock()
	for a := range r.ancestors(s.ID) {
		ss := r.st.Stages[a]
		for name, h := range ss.Artifacts {
			in.Inputs[a+"."+name] = h
			if p, ok := ss.Outputs[name].(string); ok && p != "" {
				keyed = append(keyed, p)
			}
		}
	}
	r.mu.Unlock()
	hashInput := func(key, path string) error {
		if path == "" || within(path, keyed) {
			return nil
		}
		// A path naming nothing (yet) has no content to key on.
		h, err := hashPath(ctx, r.p.Resolve(path))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		in.Inputs[strings.ReplaceAll(key, " ", ".")] = h
		keyed = append(keyed, path)
		return nil
	}
	for _, prm := range r.p.Params {
		if v, ok := sc.Params[prm.Name].(string); ok && prm.Type == spec.TypePath {
			if err := hashInput("param "+prm.Name, v); err != nil {
				return in, err
			}
		}
	}
	// Files a stage reads that the spec names directly (`checkpoint:
	// ck.ckpt`): a changed file must not be served from the cache.
	info, _ := r.e.Catalog.Stage(s.Uses)
	for _, name := range spec.PathInputs(info) {
		if v, ok := with[name].(string); ok {
			if err := hashInput("stages."+s.ID+".with."+name, v); err != nil {
				return in, err
			}
		}
	}
	return in, nil
}

// within reports whether path is one of roots or lies inside one.
func within(path string, roots []string) bool {
	for _, root := range roots {
		rel, err := filepath.Rel(root, path)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

// ancestors returns every stage id reaches through its needs.
func (r *runner) ancestors(id string) map[string]bool {
	out := map[string]bool{}
	var walk func(string)
	walk = func(id string) {
		for _, n := range r.g.Needs[id] {
			if !out[n] {
				out[n] = true
				walk(n)
			}
		}
	}
	walk(id)
	return out
}

type cacheHit struct {
	runID     string
	outputs   map[string]any
	artifacts map[string]string
}

// pluginChanged finds a stage of an earlier run that had every input of
// in but another plugin identity (a new mspipe, or a rebuilt or upgraded
// plugin): the reason `plan` gives for running a stage again. Nil when
// there is none.
func (r *runner) pluginChanged(in cacheKeyInput) *pluginChange {
	runs, _ := r.e.Store.List()
	keys := map[string]string{} // an earlier identity -> the key in would have had with it
	for _, run := range runs {
		if run.ID == r.st.ID {
			continue
		}
		for _, ss := range run.Stages {
			if ss.Plugin == "" || ss.Plugin == in.Plugin || (ss.Status != StatusSucceeded && ss.Status != StatusCached) {
				continue
			}
			key, seen := keys[ss.Plugin]
			if !seen {
				then := in
				then.Plugin = ss.Plugin
				key, _ = cacheKey(then)
				keys[ss.Plugin] = key
			}
			if key == ss.CacheKey {
				return &pluginChange{runID: run.ID, then: ss.Plugin}
			}
		}
	}
	return nil
}

type pluginChange struct {
	runID string
	then  string // the plugin identity of that run
}

// lookupCache finds a stage with the same key that succeeded in an earlier
// run and whose path outputs still hold the same content. Runs whose
// run.json cannot be read are not candidates. Without a hit, refused says
// why the last candidate with these inputs was not used ("" when there
// was none).
func (r *runner) lookupCache(ctx context.Context, key string) (hit *cacheHit, refused string) {
	runs, _ := r.e.Store.List()
	for _, run := range runs {
		if run.ID == r.st.ID {
			continue
		}
		for _, ss := range run.Stages {
			if ss.CacheKey != key || (ss.Status != StatusSucceeded && ss.Status != StatusCached) {
				continue
			}
			err := artifactsUnchanged(ctx, ss)
			if err == nil {
				from := run.ID
				if ss.CachedFrom != "" {
					from = ss.CachedFrom
				}
				return &cacheHit{runID: from, outputs: ss.Outputs, artifacts: ss.Artifacts}, ""
			}
			refused = fmt.Sprintf("run %s had these inputs, but its %v", run.ID, err)
		}
	}
	return nil, refused
}

// artifactsUnchanged returns nil when every path output of a finished
// stage still has the content hash recorded when it was produced, else
// why not (in words for the console).
func artifactsUnchanged(ctx context.Context, ss *StageState) error {
	names := make([]string, 0, len(ss.Artifacts))
	for name := range ss.Artifacts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, _ := ss.Outputs[name].(string)
		got, err := hashPath(ctx, p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("output %s (%s) is gone", name, p)
		case err != nil:
			return fmt.Errorf("output %s: %w", name, err)
		case got != ss.Artifacts[name]:
			return fmt.Errorf("output %s (%s) changed since the stage produced it", name, p)
		}
	}
	return nil
}
