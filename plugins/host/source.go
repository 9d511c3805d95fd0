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
//
// A source in a Go module that the current directory is not in (a clone
// of mspipe used from elsewhere) cannot be built by path from here: go
// would look for a module in the current directory. The command then
// builds inside the module (go -C ROOT) and writes the binary to this
// directory's plugins/ by absolute path.
func BuildCommand(name, srcDir string) string {
	out := filepath.Join("plugins", plugins.BinaryName(name))
	abs, err := filepath.Abs(srcDir)
	if err != nil {
		return fmt.Sprintf("go build -o %s %s", filepath.ToSlash(out), shellWord(filepath.ToSlash(srcDir)))
	}
	wd, _ := os.Getwd()
	if root, ok := moduleRoot(abs); ok && wd != "" && !below(wd, root) {
		rel, _ := filepath.Rel(root, abs)
		return fmt.Sprintf("go -C %s build -o %s %s", shellWord(filepath.ToSlash(root)),
			shellWord(filepath.ToSlash(filepath.Join(wd, out))), shellWord("./"+filepath.ToSlash(rel)))
	}
	src := abs
	if wd != "" && below(abs, wd) {
		rel, _ := filepath.Rel(wd, abs)
		src = "." + string(filepath.Separator) + rel // go build reads a bare path as an import path
	}
	return fmt.Sprintf("go build -o %s %s", filepath.ToSlash(out), shellWord(filepath.ToSlash(src)))
}

// below reports whether path is dir or lies inside it.
func below(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// moduleRoot returns the nearest directory at or above dir holding a
// go.mod file.
func moduleRoot(dir string) (string, bool) {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && st.Mode().IsRegular() {
			return d, true
		}
		if filepath.Dir(d) == d {
			return "", false
		}
	}
}

// shellWord quotes s for a POSIX shell when it holds anything but plain
// path characters, so the printed command can be pasted as it is.
func shellWord(s string) string {
	plain := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+=:,@", c)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
