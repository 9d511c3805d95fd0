package browser

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindPrefersTheVariable(t *testing.T) {
	t.Setenv("MSPIPE_CHROMIUM", "/opt/my/chromium")
	if got := Find(); got != "/opt/my/chromium" {
		t.Errorf("Find() = %q, want $MSPIPE_CHROMIUM", got)
	}
}

func TestFindSearchesPath(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "chromium-browser")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MSPIPE_CHROMIUM", "")
	t.Setenv("PATH", dir)
	want := fake
	if _, err := exec.LookPath("/usr/bin/chromium"); err == nil {
		want = "/usr/bin/chromium" // Debian's, which comes first
	}
	if got := Find(); got != want {
		t.Errorf("Find() = %q, want %q", got, want)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := exec.LookPath("/usr/bin/chromium"); err != nil {
		if got := Find(); got != "" {
			t.Errorf("Find() with nothing on PATH = %q, want \"\"", got)
		}
	}
}

// TestRunArguments runs a stand-in that prints its arguments: the test's
// own come after the fixed ones, and the profile is a fresh directory.
func TestRunArguments(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a; do echo \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(Run(t, fake, "--dump-dom", "file:///x.html")), "\n")
	if len(args) < 4 || args[0] != "--headless" || args[len(args)-2] != "--dump-dom" || args[len(args)-1] != "file:///x.html" {
		t.Fatalf("arguments = %q", args)
	}
	var profile string
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--user-data-dir="); ok {
			profile = p
		}
	}
	if st, err := os.Stat(profile); err != nil || !st.IsDir() {
		t.Errorf("profile %q: %v, want a directory", profile, err)
	}
}

// TestRunRendersAPage renders a page whose script changes its DOM, with
// the real Chromium when there is one.
func TestRunRendersAPage(t *testing.T) {
	chromium := Find()
	if chromium == "" {
		t.Log("SKIP: no chromium found (install Debian's chromium package, or set MSPIPE_CHROMIUM)")
		return
	}
	page := filepath.Join(t.TempDir(), "page.html")
	html := `<html><body><p id="p">before</p><script>document.getElementById("p").textContent = "after " + (6*7);</script></body></html>`
	if err := os.WriteFile(page, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	if dom := Run(t, chromium, "--dump-dom", "file://"+page); !strings.Contains(dom, `<p id="p">after 42</p>`) {
		t.Errorf("DOM = %q, want the script's change", dom)
	}
}
