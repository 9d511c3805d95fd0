// Package docs holds the user documentation; its test checks that every
// relative link in README.md and docs/*.md leads somewhere.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestLinksResolve fails for a relative link in the README, the docs or the
// example plugin's README whose file does not exist, or whose #anchor is
// not a heading or an id of the file it points into.
func TestLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"), filepath.Join("..", "examples", "plugins", "cifar-augment", "README.md"))
	if len(files) < 3 {
		t.Fatalf("found only %v: run from the docs directory", files)
	}
	for _, f := range files {
		for _, problem := range brokenLinks(f) {
			t.Error(problem)
		}
	}
}

// TestBrokenLinksFindsThem checks the checker on a small tree: a good file
// link, a good anchor, a missing file, a missing anchor, and links inside
// code that are not links.
func TestBrokenLinksFindsThem(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.md", "# Title\n\n## The `npu/train` stage\n\n### <a id=\"def-x\"></a>x\n\n## Repeat\n\n## Repeat\n")
	write("a.md", strings.Join([]string{
		"[ok](b.md) [ok](b.md#the-nputrain-stage) [ok](b.md#def-x) [ok](b.md#repeat-1) [ok](#local)",
		"[web](https://example.com/x.md) `[code](nowhere.md)`",
		"```", "[fenced](nowhere.md)", "```",
		"## Local",
		"[gone](c.md) [bad anchor](b.md#nothing) [bad local](#elsewhere) [dir](./)",
	}, "\n"))
	got := brokenLinks(filepath.Join(dir, "a.md"))
	want := []string{"c.md", "b.md#nothing", "#elsewhere"}
	if len(got) != len(want) {
		t.Fatalf("brokenLinks = %q, want problems with %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], "("+w+")") {
			t.Errorf("problem %d = %q, want one about %s", i, got[i], w)
		}
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Quick start":                  "quick-start",
		"Who checks `with`":            "who-checks-with",
		"### `npu/train`":              "nputrain",
		"Clusters, collectives & more": "clusters-collectives--more",
		"Ctrl-C and SIGTERM":           "ctrl-c-and-sigterm",
		"[Link](x.md) text":            "link-text",
	} {
		if got := slug(strings.TrimLeft(in, "# ")); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

var (
	linkRE   = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	codeRE   = regexp.MustCompile("`[^`]*`")
	idRE     = regexp.MustCompile(`\bid="([^"]+)"`)
	tagRE    = regexp.MustCompile(`<[^>]*>`)
	headerRE = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// brokenLinks returns one message per link of the markdown file that does
// not resolve; an unreadable file is one message too.
func brokenLinks(file string) []string {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	inFence := false
	for i, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if err := resolve(file, target); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: link (%s): %v", file, i+1, target, err))
			}
		}
	}
	return problems
}

// resolve checks one relative link of file: the path exists, and an anchor
// names a heading or an id of the markdown file it points into.
func resolve(file, target string) error {
	path, anchor, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("no such file %s", dest)
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(dest, ".md") {
		return fmt.Errorf("an anchor into %s, which is not markdown", dest)
	}
	anchors, err := anchorsOf(dest)
	if err != nil {
		return err
	}
	if !anchors[anchor] {
		return fmt.Errorf("%s has no heading or id %q", dest, anchor)
	}
	return nil
}

// anchorsOf lists the anchors GitHub makes for a markdown file: a slug per
// heading (repeats numbered -1, -2, ...) and every id="..." attribute.
func anchorsOf(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range idRE.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if h := headerRE.FindStringSubmatch(line); h != nil {
			s := slug(h[1])
			if n := seen[s]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
	}
	return anchors, nil
}

// slug is GitHub's anchor for a heading: its text without markup, lower
// case, letters, digits, '-' and '_' kept, spaces turned into '-'.
func slug(heading string) string {
	heading = tagRE.ReplaceAllString(heading, "")
	heading = linkRE.ReplaceAllStringFunc(heading, func(l string) string { return l[1:strings.Index(l, "](")] })
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
