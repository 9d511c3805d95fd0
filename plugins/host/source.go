package host

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/plugins"
)

// SourceDirs are where a plugin's Go source may sit, relative to the
// directory of the spec that uses it: `uses: NAME` has its source in
// plugins/NAME or examples/plugins/NAME next to the spec. So a spec in
// examples/ finds examples/plugins/NAME, and one at the root of a clone
// finds either.
var SourceDirs = []string{"plugins", filepath.Join("examples", "plugins")}

// PluginSource returns the directory of the Go main package that builds
// the plugin `uses: name` names, when a spec in specDir has one in
// [SourceDirs], and whether it found one. A directory counts only if one
// of its .go files (not a test) declares package main: plugins/sdk, a
// library, is no source of a stage "sdk". A name with segments (acme/aug)
// is a nested directory; plugins.ValidateName admits no "." or "..", so
// the name cannot step out of those directories.
func PluginSource(specDir, name string) (string, bool) {
	if plugins.ValidateName(name) != nil {
		return "", false
	}
	for _, d := range SourceDirs {
		dir := filepath.Join(specDir, d, filepath.FromSlash(name))
		if isMainPackage(dir) {
			return dir, true
		}
	}
	return "", false
}

// isMainPackage reports whether dir holds a .go file of package main.
func isMainPackage(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		if packageClause(filepath.Join(dir, n)) == "main" {
			return true
		}
	}
	return false
}

// maxHeaderLines bounds how far packageClause reads: the package clause
// follows the file's comments, which are short in plugin sources.
const maxHeaderLines = 200

// packageClause returns the package name a Go file declares, or "" when
// its first lines hold none.
func packageClause(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inBlock := false
	for i := 0; i < maxHeaderLines && sc.Scan(); i++ {
		line := strings.TrimSpace(sc.Text())
		if inBlock {
			if _, rest, ok := strings.Cut(line, "*/"); ok {
				inBlock, line = false, strings.TrimSpace(rest)
			} else {
				continue
			}
		}
		if strings.HasPrefix(line, "/*") {
			if _, rest, ok := strings.Cut(line[2:], "*/"); ok {
				line = strings.TrimSpace(rest)
			} else {
				inBlock = true
				continue
			}
		}
		if line == "" || strings.HasPrefix(line, "//") {
			continue
		}
		if name, ok := strings.CutPrefix(line, "package "); ok {
			name, _, _ = strings.Cut(strings.TrimSpace(name), " ")
			return strings.TrimSuffix(name, ";")
		}
		return ""
	}
	return ""
}

// BuildCommand is the command, run in the current directory, that builds
// the plugin whose Go main package is in srcDir into ./plugins, the first
// directory of [DefaultSearchPath], under the name mspipe looks for. The
// source is named relative to the current directory when it is below it,
// else by its absolute path.
func BuildCommand(name, srcDir string) string {
	src := srcDir
	if abs, err := filepath.Abs(srcDir); err == nil {
		src = abs
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				src = "." + string(filepath.Separator) + rel // go build reads a bare path as an import path
			}
		}
	}
	return fmt.Sprintf("go build -o %s %s", filepath.ToSlash(filepath.Join("plugins", plugins.BinaryName(name))), filepath.ToSlash(src))
}
