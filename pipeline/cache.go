package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

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
// names, modes and contents, in sorted order), so a path's identity is its
// content, not its name or mtime.
func hashPath(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if !st.IsDir() {
		if err := hashFile(h, path); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
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
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\x00%d\x00", n)
	return nil
}

// cacheKey computes the stage's cache key from its plugin identity,
// resolved inputs, cluster (device count and rank table content),
// environment (pipeline's and stage's) and the content of every path
// output of the stages it depends on, and of path params.
func (r *runner) cacheKey(s *spec.Stage, sc *spec.Scope, ident string, with map[string]any) (string, error) {
	in := cacheKeyInput{Plugin: ident, With: with, Devices: sc.Cluster.Devices, Inputs: map[string]string{}}
	if sc.Cluster.RankTable != "" {
		h, err := hashPath(sc.Cluster.RankTable)
		if err != nil {
			return "", fmt.Errorf("rank table: %w", err)
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
	r.mu.Lock()
	for a := range r.ancestors(s.ID) {
		for name, h := range r.st.Stages[a].Artifacts {
			in.Inputs[a+"."+name] = h
		}
	}
	r.mu.Unlock()
	for _, prm := range r.p.Params {
		if prm.Type != spec.TypePath {
			continue
		}
		// A path param naming nothing (yet) has no content to key on.
		if v, ok := sc.Params[prm.Name].(string); ok && v != "" {
			if h, err := hashPath(r.p.Resolve(v)); err == nil {
				in.Inputs["params."+prm.Name] = h
			}
		}
	}
	return cacheKey(in)
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

// lookupCache finds a stage with the same key that succeeded in an earlier
// run and whose path outputs still hold the same content. Runs whose
// run.json cannot be read are not candidates.
func (r *runner) lookupCache(key string) *cacheHit {
	runs, _ := r.e.Store.List()
	for _, run := range runs {
		if run.ID == r.st.ID {
			continue
		}
		for _, ss := range run.Stages {
			if ss.CacheKey != key || (ss.Status != StatusSucceeded && ss.Status != StatusCached) {
				continue
			}
			if artifactsUnchanged(ss) {
				from := run.ID
				if ss.CachedFrom != "" {
					from = ss.CachedFrom
				}
				return &cacheHit{runID: from, outputs: ss.Outputs, artifacts: ss.Artifacts}
			}
		}
	}
	return nil
}

// artifactsUnchanged reports whether every path output of a finished stage
// still has the content hash recorded when it was produced.
func artifactsUnchanged(ss *StageState) bool {
	for name, h := range ss.Artifacts {
		p, _ := ss.Outputs[name].(string)
		if got, err := hashPath(p); err != nil || got != h {
			return false
		}
	}
	return true
}
