package pipeline

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
)

// The digest cache remembers the SHA-256 of the regular files mspipe has
// hashed (path outputs, path inputs, rank tables), keyed by what stat says
// about each file: its path, size, modification and change times in
// nanoseconds, inode and device, as build tools key their file caches. A
// file whose stat matches an entry is not read again, so a cached rerun of
// a stage whose output is a multi-GB directory costs a walk of its tree,
// not a read of its bytes. Any difference in the key (a rewrite, a
// touch, a chmod or a rename updates the change time) and the file is
// hashed again.
//
// An entry is only made when the file cannot have changed unseen while it
// was read: its stat is the same before and after the read, and its last
// modification and change are older than the read's start by more than
// the file system's timestamp granularity (racyMargin). A write in the
// same timestamp tick as the read would otherwise leave the key as it was.
//
// The cache lives in one JSON file under the runs directory
// (digestCacheFile), written atomically; it is bounded (maxDigestEntries,
// least recently used dropped first; maxDigestFileBytes read at most). A
// file that cannot be read or parsed is ignored (and replaced at the next
// save), as is any entry that does not hold a well-formed digest: the
// cache only ever saves reading, it never decides a digest on its own.

// digestCacheFile is where the digest cache lives, relative to the runs
// directory (its name is not a run id, so run listings skip it).
const digestCacheFile = ".cache/digests.json"

// Bounds of the digest cache: entries kept (about 250 bytes each on disk)
// and bytes read from its file.
const (
	maxDigestEntries   = 20000
	maxDigestFileBytes = 16 << 20
)

// racyMargin is how much older than the start of its read a file's last
// change must be for its digest to be remembered: above the granularity of
// file systems with sub-second timestamps (one kernel tick of the coarse
// clock, at most 10 ms). A file written just before it is hashed (a
// stage's output) is waited out once per hash (waitRacy), so that its
// first hash is remembered. coarseRacyMargin is for a file whose times
// have no sub-second part, which may come from a file system with 1 s or
// 2 s timestamps; such a file is not waited for, only remembered at a
// later hash.
const (
	racyMargin       = 25 * time.Millisecond
	coarseRacyMargin = 3 * time.Second
)

// usedRefresh is how old, in seconds, an entry's use time may grow
// before a hit refreshes it.
const usedRefresh = 3600

// digestCacheVersion changes when the meaning of an entry changes; a file
// of another version is ignored.
const digestCacheVersion = 1

// statKey is what a file's digest is remembered under, besides its path.
type statKey struct {
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
	Inode   uint64 `json:"ino"`
	Device  uint64 `json:"dev"`
}

// digestEntry is one remembered digest.
type digestEntry struct {
	statKey
	SHA256 string `json:"sha256"`
	Used   int64  `json:"used"` // unix seconds of the last hit or hash, for eviction
}

// digestFile is the digest cache's file.
type digestFile struct {
	Version int                     `json:"version"`
	Entries map[string]*digestEntry `json:"entries"`
}

// digestCache is the digest cache of one runs directory. A nil
// *digestCache remembers nothing: every file is read. Safe for concurrent
// use.
type digestCache struct {
	path     string // the cache file; "" keeps the cache in memory only
	readOnly bool   // read the file, never write it (plan)
	// fineMargin and coarseMargin are racyMargin and coarseRacyMargin;
	// tests lower them rather than wait.
	fineMargin, coarseMargin time.Duration

	mu      sync.Mutex
	loaded  bool
	entries map[string]*digestEntry
	dirty   bool
}

// newDigestCache returns the digest cache stored at path (read on first
// use); an empty path makes one that is never saved.
func newDigestCache(path string) *digestCache {
	return &digestCache{path: path, fineMargin: racyMargin, coarseMargin: coarseRacyMargin}
}

// loadLocked reads the cache file once. Whatever cannot be trusted is
// dropped: an unreadable or malformed file, another version, an entry
// without a well-formed digest or with an impossible key.
func (c *digestCache) loadLocked() {
	if c.loaded {
		return
	}
	c.loaded = true
	c.entries = map[string]*digestEntry{}
	if c.path == "" {
		return
	}
	for path, e := range readDigestFile(c.path) {
		c.entries[path] = e
	}
}

// readDigestFile returns the well-formed entries of a cache file, none
// when the file is missing, too large, unreadable or of another version.
func readDigestFile(path string) map[string]*digestEntry {
	data, err := userfile.ReadFile(context.Background(), path, maxDigestFileBytes)
	if err != nil {
		return nil
	}
	var f digestFile
	if err := json.Unmarshal(data, &f); err != nil || f.Version != digestCacheVersion {
		return nil
	}
	out := make(map[string]*digestEntry, len(f.Entries))
	for p, e := range f.Entries {
		if e == nil || !filepath.IsAbs(p) || e.Size < 0 || !validDigest(e.SHA256) {
			continue
		}
		out[p] = e
	}
	return out
}

// validDigest reports whether s is a SHA-256 in lower-case hex.
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == lowerHex(s)
}

func lowerHex(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// lookup returns the remembered digest of the file at path whose stat is
// key, if there is one for exactly that key.
func (c *digestCache) lookup(path string, key statKey) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loadLocked()
	e := c.entries[path]
	if e == nil || e.statKey != key {
		return "", false
	}
	// The use time only orders eviction: refreshing it hourly is enough,
	// and a lookup that changes nothing else does not rewrite the file.
	if now := time.Now().Unix(); now-e.Used > usedRefresh {
		e.Used, c.dirty = now, true
	}
	return e.SHA256, true
}

// remember records the digest of the file at path, read from readStart on,
// whose stat was key before and after the read, unless the file changed
// too recently for its key to show a later change (see racyMargin).
func (c *digestCache) remember(path string, key statKey, digest string, readStart time.Time) {
	if c == nil || c.racy(key, readStart) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loadLocked()
	c.entries[path] = &digestEntry{statKey: key, SHA256: digest, Used: time.Now().Unix()}
	c.dirty = true
}

// racy reports whether a file with this key may change again within the
// same timestamps after a read that started at readStart.
func (c *digestCache) racy(key statKey, readStart time.Time) bool {
	margin := c.fineMargin
	if key.MtimeNs%int64(time.Second) == 0 && key.CtimeNs%int64(time.Second) == 0 {
		margin = c.coarseMargin
	}
	limit := readStart.Add(-margin).UnixNano()
	return key.MtimeNs >= limit || key.CtimeNs >= limit
}

// waitRacy waits, at most the fine margin and while ctx lasts, until the
// newest of keys (files about to be read) is old enough to be remembered
// once read. Files with coarse times are not waited for.
func (c *digestCache) waitRacy(ctx context.Context, keys []statKey) {
	if c == nil || c.fineMargin <= 0 {
		return
	}
	var newest int64
	for _, k := range keys {
		if k.MtimeNs%int64(time.Second) == 0 && k.CtimeNs%int64(time.Second) == 0 {
			continue
		}
		newest = max(newest, k.MtimeNs, k.CtimeNs)
	}
	wait := time.Until(time.Unix(0, newest).Add(c.fineMargin + time.Millisecond))
	if newest == 0 || wait <= 0 {
		return
	}
	t := time.NewTimer(min(wait, c.fineMargin+time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// save writes the cache file when something changed since the last save:
// the entries of the file as it is now (another run may have saved since)
// under this process's, the least recently used dropped beyond
// maxDigestEntries. A failure to save costs only time later, so the
// caller may ignore it.
func (c *digestCache) save() error {
	if c == nil || c.path == "" || c.readOnly {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty {
		return nil
	}
	merged := readDigestFile(c.path)
	if merged == nil {
		merged = map[string]*digestEntry{}
	}
	for p, e := range c.entries {
		if old := merged[p]; old == nil || old.Used <= e.Used {
			merged[p] = e
		}
	}
	if len(merged) > maxDigestEntries {
		paths := make([]string, 0, len(merged))
		for p := range merged {
			paths = append(paths, p)
		}
		sort.Slice(paths, func(i, j int) bool {
			a, b := merged[paths[i]], merged[paths[j]]
			if a.Used != b.Used {
				return a.Used > b.Used
			}
			return paths[i] < paths[j]
		})
		for _, p := range paths[maxDigestEntries:] {
			delete(merged, p)
		}
	}
	data, err := json.Marshal(digestFile{Version: digestCacheVersion, Entries: merged})
	if err != nil {
		return fmt.Errorf("encode digest cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("digest cache: %w", err)
	}
	if err := atomicfile.WriteFile(c.path, data, 0o644); err != nil {
		return fmt.Errorf("digest cache: %w", err)
	}
	c.entries, c.dirty = merged, false
	return nil
}

// errStatKey is returned by fileStatKey where stat does not give every
// field of the key; the file is then always read.
var errStatKey = errors.New("no stat key on this platform")
