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
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/plugins"
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

// digest returns the content digest of path (see pathDigest) with the
// run's digest cache, then saves the cache. While a large path is read,
// stage sid shows progress: a console line when it starts and ends, and
// bytes read out of those to read in the live view and events.jsonl; what
// names the path there ("output model").
func (r *runner) digest(ctx context.Context, sid, what, path string) (string, error) {
	var start time.Time
	progress := func(done, total int64) {
		ev := plugins.ProgressEvent{Done: done, Total: total, Unit: "bytes", Message: "hashing " + what}
		if start.IsZero() {
			start = time.Now()
			r.log.Info().Str("event", "hashing").Str("stage", sid).Str("path", path).Int64("bytes", total).
				Msgf("[%s] hashing %s (%s to read): %s", sid, what, bytesize.Format(total), path)
		}
		r.events.Info().Str("stage", sid).Str("event", "progress").Int64("done", done).Int64("total", total).Str("unit", ev.Unit).Msg(ev.Message)
		if r.e.Progress != nil {
			r.e.Progress.Progress(sid, ev)
		}
		if done == total {
			r.log.Info().Str("event", "hashed").Str("stage", sid).Str("path", path).Int64("bytes", total).
				Msgf("[%s] hashed %s: %s in %s", sid, what, bytesize.Format(total), dur(time.Since(start).Seconds()))
		}
	}
	h, err := pathDigest(ctx, path, r.digests, progress)
	if serr := r.digests.save(); serr != nil {
		r.log.Warn().Str("event", "digest_cache_not_saved").Err(serr).Msgf("%v (later runs hash their outputs again)", serr)
	}
	return h, err
}

// hashPath is pathDigest without a digest cache or progress.
func hashPath(ctx context.Context, path string) (string, error) {
	return pathDigest(ctx, path, nil, nil)
}

// pathDigest returns the content digest of a file (the SHA-256 of its
// bytes, as sha256sum prints it) or of a directory tree (the SHA-256 of
// the sorted list of its regular files' relative names, digests and
// sizes), so a path's identity is its content, not its name or mtime.
// Only regular files are read: a device, FIFO or socket (named directly or
// found in the tree) is refused with an error naming it, since reading one
// may never end (/dev/zero) or block forever (a FIFO without a writer).
// Symbolic links inside a tree are not followed. Files whose stat matches
// an entry of digests are not read (see digestCache); progress, when not
// nil, is told the bytes read so far out of those to read. Hashing stops
// when ctx is done.
func pathDigest(ctx context.Context, path string, digests *digestCache, progress func(done, total int64)) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	var files []hashItem
	if !st.IsDir() {
		files = []hashItem{{path: path, info: st, size: -1}}
	} else {
		err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			switch t := d.Type(); {
			case t.IsRegular():
				info, err := d.Info()
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(path, p)
				files = append(files, hashItem{path: p, rel: filepath.ToSlash(rel), info: info, size: -1})
			case t&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0:
				return fmt.Errorf("%s is %s, %w", p, fileKind(t), userfile.ErrNotRegular)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	// What the cache knows is not read; the rest is what progress counts.
	var total int64
	var toRead []statKey
	for i := range files {
		f := &files[i]
		key, err := fileStatKey(f.info)
		if err == nil {
			f.digest, _ = digests.lookup(f.path, key)
		}
		if f.digest == "" {
			total += f.info.Size()
			toRead = append(toRead, key)
		}
	}
	// A file written a moment ago (a stage's output) is read once its
	// times can show a later write, so that its digest can be remembered.
	digests.waitRacy(ctx, toRead)
	counter := &progressCounter{total: total, report: progress}
	for i := range files {
		f := &files[i]
		if f.digest != "" {
			continue
		}
		if f.digest, f.size, err = fileDigest(ctx, f.path, digests, counter); err != nil {
			return "", err
		}
	}
	counter.finish()
	if !st.IsDir() {
		return files[0].digest, nil
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	h := sha256.New()
	for _, f := range files {
		size := f.size
		if size < 0 {
			size = f.info.Size() // a cache hit: the size is part of its key
		}
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00", f.rel, f.digest, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashItem is one regular file of a path being hashed.
type hashItem struct {
	path, rel string // rel: slash-separated, within the tree ("" for a file)
	info      fs.FileInfo
	digest    string
	size      int64 // bytes read; -1 until read
}

// fileDigest reads the regular file at path and returns the SHA-256 of its
// bytes and their count, remembering the digest in digests when the file
// did not change while it was read.
func fileDigest(ctx context.Context, path string, digests *digestCache, counter *progressCounter) (string, int64, error) {
	start := time.Now()
	f, before, err := userfile.Open(path)
	if errors.Is(err, userfile.ErrNotRegular) {
		return "", 0, fmt.Errorf("%s %w", path, err)
	}
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := userfile.Copy(ctx, io.MultiWriter(h, counter), f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	after, err := f.Stat()
	if err != nil {
		return digest, n, nil
	}
	k0, err0 := fileStatKey(before)
	k1, err1 := fileStatKey(after)
	if err0 == nil && err1 == nil && k0 == k1 && k1.Size == n {
		digests.remember(path, k1, digest, start)
	}
	return digest, n, nil
}

// progressCounter counts the bytes hashed and reports them at most every
// progressEvery, and once at the end, when there are at least
// progressMinBytes to hash: smaller outputs take less time than a glance.
type progressCounter struct {
	total, done int64
	report      func(done, total int64)
	last        time.Time
	reported    bool
}

const (
	progressMinBytes = 64 << 20
	progressEvery    = 250 * time.Millisecond
)

func (c *progressCounter) Write(p []byte) (int, error) {
	c.done += int64(len(p))
	if c.report != nil && c.total >= progressMinBytes && time.Since(c.last) >= progressEvery {
		c.last = time.Now()
		c.reported = true
		c.report(min(c.done, c.total), c.total)
	}
	return len(p), nil
}

// finish reports the end of a hash whose progress was shown.
func (c *progressCounter) finish() {
	if c.reported {
		c.report(c.total, c.total)
	}
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
		h, err := r.digest(ctx, s.ID, "rank table", sc.Cluster.RankTable)
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
		h, err := r.digest(ctx, s.ID, key, r.p.Resolve(path))
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
	runs := r.runs.list()
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
func (r *runner) lookupCache(ctx context.Context, sid, key string) (hit *cacheHit, refused string) {
	runs := r.runs.list()
	for _, run := range runs {
		if run.ID == r.st.ID {
			continue
		}
		for _, ss := range run.Stages {
			if ss.CacheKey != key || (ss.Status != StatusSucceeded && ss.Status != StatusCached) {
				continue
			}
			err := artifactsUnchanged(ctx, ss, func(name, path string) (string, error) {
				return r.digest(ctx, sid, "output "+name, path)
			})
			if err == nil {
				from := run.ID
				if ss.CachedFrom != "" {
					from = ss.CachedFrom
				}
				// Copies: the states are shared by every lookup of this run.
				return &cacheHit{runID: from, outputs: maps.Clone(ss.Outputs), artifacts: maps.Clone(ss.Artifacts)}, ""
			}
			refused = fmt.Sprintf("run %s had these inputs, but its %v", run.ID, err)
		}
	}
	return nil, refused
}

// artifactsUnchanged returns nil when every path output of a finished
// stage still has the content hash recorded when it was produced, else
// why not (in words for the console). digest hashes a named output.
func artifactsUnchanged(ctx context.Context, ss *StageState, digest func(name, path string) (string, error)) error {
	names := make([]string, 0, len(ss.Artifacts))
	for name := range ss.Artifacts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, _ := ss.Outputs[name].(string)
		got, err := digest(name, p)
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
