//go:build linux

package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testDigests is a digest cache stored at path that remembers files
// however recently they changed (the tests do not wait out racyMargin).
func testDigests(path string) *digestCache {
	c := newDigestCache(path)
	c.fineMargin, c.coarseMargin = -time.Hour, -time.Hour
	return c
}

func sha256Hex(data string) string {
	sum := sha256.Sum256([]byte(data))
	return hex.EncodeToString(sum[:])
}

// poison rewrites every digest in the cache file at path to fake, so that a
// digest that comes back fake was taken from the cache, not read.
func poison(t *testing.T, path, fake string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f digestFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Entries) == 0 {
		t.Fatalf("%s has no entry", path)
	}
	for _, e := range f.Entries {
		e.SHA256 = fake
	}
	if data, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A file's digest is its SHA-256; once remembered, a file whose stat is
// unchanged is not read again (the poisoned entry comes back), and a file
// that changed is: same size with a new mtime, or the old mtime with
// another size, or another inode with the same size and mtime.
func TestDigestCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cachePath := filepath.Join(dir, "runs", digestCacheFile)
	file := filepath.Join(dir, "out.bin")
	if err := os.WriteFile(file, []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := testDigests(cachePath)
	got, err := pathDigest(ctx, file, c, nil)
	if err != nil || got != sha256Hex("first") {
		t.Fatalf("digest = %s, %v; want sha256 of the content %s", got, err, sha256Hex("first"))
	}
	if err := c.save(); err != nil {
		t.Fatal(err)
	}
	fake := strings.Repeat("ab", 32)
	poison(t, cachePath, fake)
	if got, _ := pathDigest(ctx, file, testDigests(cachePath), nil); got != fake {
		t.Fatalf("unchanged file: digest %s, want the cached %s (the file was read again)", got, fake)
	}

	old := time.Now().Add(-time.Hour).Truncate(time.Second).Add(123456789)
	changes := []struct {
		name    string
		content string
		change  func(t *testing.T)
	}{
		{"same size, new mtime", "other", func(t *testing.T) {
			if err := os.WriteFile(file, []byte("other"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(file, old, old); err != nil {
				t.Fatal(err)
			}
		}},
		{"same mtime, another size", "longer!", func(t *testing.T) {
			if err := os.WriteFile(file, []byte("longer!"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(file, old, old); err != nil {
				t.Fatal(err)
			}
		}},
		{"same size and mtime, another inode", "LONGER!", func(t *testing.T) {
			tmp := file + ".new"
			if err := os.WriteFile(tmp, []byte("LONGER!"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(tmp, old, old); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, file); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, ch := range changes {
		// Remember the current content, poison it, then change the file:
		// the fake digest must not come back.
		c := testDigests(cachePath)
		if _, err := pathDigest(ctx, file, c, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.save(); err != nil {
			t.Fatal(err)
		}
		poison(t, cachePath, fake)
		ch.change(t)
		got, err := pathDigest(ctx, file, testDigests(cachePath), nil)
		if err != nil || got != sha256Hex(ch.content) {
			t.Errorf("%s: digest %s, %v; want %s (read again)", ch.name, got, err, sha256Hex(ch.content))
		}
	}
}

// A directory's digest is the same with and without the cache, and the
// cached one follows a change of one file in it.
func TestDigestCacheTree(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	write := func(rel, content string) {
		p := filepath.Join(tree, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "alpha")
	write("sub/b.txt", "beta")
	c := testDigests(filepath.Join(dir, "digests.json"))
	plain, err := hashPath(ctx, tree)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the first reads and remembers, the second hits
		if got, err := pathDigest(ctx, tree, c, nil); err != nil || got != plain {
			t.Fatalf("pass %d: digest %s, %v; want %s as without the cache", i, got, err, plain)
		}
	}
	write("sub/b.txt", "BETA")
	changed, err := pathDigest(ctx, tree, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := hashPath(ctx, tree); changed != want || changed == plain {
		t.Errorf("after a change: cached digest %s, without cache %s, before %s", changed, want, plain)
	}
}

// A cache file that is not JSON, of another version, or with malformed
// entries is ignored: digests are read from the files, and the next save
// replaces it with a good one.
func TestDigestCacheCorrupt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "out.bin")
	if err := os.WriteFile(file, []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	key, err := fileStatKey(info)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(sha string) string {
		e, _ := json.Marshal(map[string]*digestEntry{file: {statKey: key, SHA256: sha}})
		return string(e)
	}
	cases := map[string]string{
		"not json":        "\x00\x01garbage{",
		"truncated":       `{"version":1,"entries":{"` + file,
		"other version":   `{"version":99,"entries":` + entry(strings.Repeat("ab", 32)) + `}`,
		"short digest":    `{"version":1,"entries":` + entry("abcd") + `}`,
		"not hex":         `{"version":1,"entries":` + entry(strings.Repeat("zz", 32)) + `}`,
		"upper-case hex":  `{"version":1,"entries":` + entry(strings.Repeat("AB", 32)) + `}`,
		"wrong json type": `{"version":1,"entries":[1,2,3]}`,
	}
	for name, content := range cases {
		cachePath := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(cachePath, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		c := testDigests(cachePath)
		got, err := pathDigest(ctx, file, c, nil)
		if err != nil || got != sha256Hex("content") {
			t.Errorf("%s: digest %s, %v; want %s", name, got, err, sha256Hex("content"))
			continue
		}
		if err := c.save(); err != nil {
			t.Fatalf("%s: save: %v", name, err)
		}
		if e := readDigestFile(cachePath)[file]; e == nil || e.SHA256 != sha256Hex("content") {
			t.Errorf("%s: after a save the file holds %+v, want the real digest", name, e)
		}
	}
}

// A file that changed within the margin before its read started is not
// remembered: a write in the same timestamp tick after the read would
// leave its key as it was. One that changed before is.
func TestDigestCacheSkipsRacyFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "fresh.bin")
	if err := os.WriteFile(file, []byte("fresh"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	key, err := fileStatKey(info)
	if err != nil {
		t.Fatal(err)
	}
	changed := time.Unix(0, max(key.MtimeNs, key.CtimeNs))
	c := newDigestCache("") // the real margins
	margin := c.fineMargin
	if key.MtimeNs%int64(time.Second) == 0 && key.CtimeNs%int64(time.Second) == 0 {
		margin = c.coarseMargin
	}
	c.remember(file, key, sha256Hex("fresh"), changed.Add(margin/2))
	if _, ok := c.lookup(file, key); ok {
		t.Errorf("a file read %v after its change was remembered (margin %v)", margin/2, margin)
	}
	c.remember(file, key, sha256Hex("fresh"), changed.Add(margin+time.Millisecond))
	if _, ok := c.lookup(file, key); !ok {
		t.Errorf("a file read %v after its change was not remembered", margin+time.Millisecond)
	}
}

// The cache keeps at most maxDigestEntries, dropping the least recently
// used.
func TestDigestCacheBounded(t *testing.T) {
	dir := t.TempDir()
	c := testDigests(filepath.Join(dir, "digests.json"))
	c.loaded, c.entries, c.dirty = true, map[string]*digestEntry{}, true
	for i := 0; i < maxDigestEntries+10; i++ {
		p := filepath.Join(dir, "f", strconv.Itoa(i))
		c.entries[p] = &digestEntry{SHA256: strings.Repeat("ab", 32), Used: int64(1000 + i)}
	}
	if err := c.save(); err != nil {
		t.Fatal(err)
	}
	got := readDigestFile(c.path)
	if len(got) != maxDigestEntries {
		t.Fatalf("%d entries saved, want %d", len(got), maxDigestEntries)
	}
	for _, e := range got {
		if e.Used < 1010 {
			t.Fatalf("an entry used at %d was kept, the 10 oldest should go", e.Used)
		}
	}
}

// A file written just before it is hashed (a stage's output) is waited
// out for the margin, then read and remembered: its first hash serves the
// next lookup.
func TestDigestCacheRemembersFreshOutput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "fresh.bin")
	if err := os.WriteFile(file, []byte("fresh"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := fileStatKey(info)
	if key.MtimeNs%int64(time.Second) == 0 && key.CtimeNs%int64(time.Second) == 0 {
		t.Skip("this file system's times have no sub-second part")
	}
	c := newDigestCache(filepath.Join(dir, "digests.json")) // the real margins
	if _, err := pathDigest(ctx, file, c, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.lookup(file, key); !ok || got != sha256Hex("fresh") {
		t.Errorf("a fresh file was not remembered: %q, %v", got, ok)
	}
}
