package catalog

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// installed and goRun are the build info of one source built both ways:
// go install stamps the checkout and a pseudo-version, go run stamps
// neither; the settings and dependencies are the same.
func installed() *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/mspipe/mspipe", Version: "v0.0.0-20261128164538-433b78a03a1f"},
		Deps:      []*debug.Module{{Path: "github.com/hashicorp/go-plugin", Version: "v1.6.3", Sum: "h1:aaa="}},
		Settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"}, {Key: "CGO_ENABLED", Value: "1"}, {Key: "GOOS", Value: "linux"},
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "433b78a03a1f1876323940777b82360cf07d99e7"},
			{Key: "vcs.time", Value: "2026-11-28T16:45:38Z"}, {Key: "vcs.modified", Value: "false"},
		},
	}
}

func goRun() *debug.BuildInfo {
	info := installed()
	info.Main.Version = "(devel)"
	info.Settings = info.Settings[:3]
	return info
}

const goRunExe = "/tmp/go-build2443922840/b001/exe/mspipe"

func cleanAt(rev string) func(context.Context) (string, bool) {
	return func(context.Context) (string, bool) { return rev, true }
}

func dirty(context.Context) (string, bool) { return "", false }

// TestBuildSourceGoRunMatchesInstall: the binary go run links and the one
// go install writes, from one clean checkout, name the same source; what
// would make them differ in code (another revision, a dependency, the Go
// version, a setting) changes it; a modified checkout, a build without
// build info and an unstamped binary that go run did not build name none.
func TestBuildSourceGoRunMatchesInstall(t *testing.T) {
	ctx := context.Background()
	const rev = "433b78a03a1f1876323940777b82360cf07d99e7"
	inst, ok := buildSource(ctx, installed(), "/root/go/bin/mspipe", dirty)
	if !ok || !strings.HasPrefix(inst, "revision "+rev+" build ") {
		t.Fatalf("installed: %q, %v", inst, ok)
	}
	run, ok := buildSource(ctx, goRun(), goRunExe, cleanAt(rev))
	if !ok || run != inst {
		t.Errorf("go run: %q, %v; want the installed binary's %q", run, ok, inst)
	}

	differ := map[string]func() (*debug.BuildInfo, string, func(context.Context) (string, bool)){
		"another revision": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			return goRun(), goRunExe, cleanAt("ffff")
		},
		"a dependency": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			info := installed()
			info.Deps[0] = &debug.Module{Path: "github.com/hashicorp/go-plugin", Version: "v1.6.4", Sum: "h1:bbb="}
			return info, "", dirty
		},
		"a replaced dependency": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			info := installed()
			info.Deps[0].Replace = &debug.Module{Path: "../go-plugin", Version: "(devel)"}
			return info, "", dirty
		},
		"the Go version": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			info := installed()
			info.GoVersion = "go1.26.9"
			return info, "", dirty
		},
		"a build setting": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			info := installed()
			info.Settings[1].Value = "0"
			return info, "", dirty
		},
	}
	for name, build := range differ {
		info, exe, checkout := build()
		got, ok := buildSource(ctx, info, exe, checkout)
		if !ok || got == inst {
			t.Errorf("%s: %q, %v; want a source other than %q", name, got, ok, inst)
		}
	}

	modified := installed()
	modified.Settings[6].Value = "true"
	none := map[string]func() (*debug.BuildInfo, string, func(context.Context) (string, bool)){
		"no build info": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			return nil, goRunExe, cleanAt(rev)
		},
		"a modified checkout": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			return modified, "", cleanAt(rev)
		},
		"go run, dirty checkout": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			return goRun(), goRunExe, dirty
		},
		"unstamped, not go run": func() (*debug.BuildInfo, string, func(context.Context) (string, bool)) {
			return goRun(), "/root/go/bin/mspipe", cleanAt(rev)
		},
	}
	for name, build := range none {
		info, exe, checkout := build()
		if got, ok := buildSource(ctx, info, exe, checkout); ok {
			t.Errorf("%s: named %q; want no source (the executable's hash)", name, got)
		}
	}

	mod := installed()
	mod.Main.Sum = "h1:ccc="
	mod.Main.Version = "v1.2.0"
	if got, ok := buildSource(ctx, mod, "", dirty); !ok || !strings.HasPrefix(got, "module github.com/mspipe/mspipe@v1.2.0 h1:ccc= build ") {
		t.Errorf("a module version: %q, %v", got, ok)
	}
}

func TestBuiltByGoRun(t *testing.T) {
	for exe, want := range map[string]bool{
		goRunExe:                      true,
		"/root/go/bin/mspipe":         false,
		"/tmp/go-build1/b001/mspipe":  false,
		"/home/me/exe/mspipe":         false,
		"/tmp/go-build9/b187/x.test":  false,
		"/var/go-build7/b001/exe/foo": true,
	} {
		if got := builtByGoRun(exe); got != want {
			t.Errorf("builtByGoRun(%q) = %v, want %v", exe, got, want)
		}
	}
}

// TestCheckoutRevision runs git on a real checkout: clean gives its HEAD;
// a changed or untracked file makes it not clean, an ignored one does not.
func TestCheckoutRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("a.go", "package a\n")
	write(".gitignore", "/runs/\n")
	git("add", ".")
	git("commit", "-qm", "one")
	head := git("rev-parse", "HEAD")
	ctx := context.Background()
	if rev, clean := checkoutRevision(ctx, dir); !clean || rev != head {
		t.Errorf("clean checkout: %q, %v; want %s, clean", rev, clean, head)
	}
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("runs/x", "ignored")
	if _, clean := checkoutRevision(ctx, dir); !clean {
		t.Error("an ignored file made the checkout modified")
	}
	write("new.go", "package a\n")
	if _, clean := checkoutRevision(ctx, dir); clean {
		t.Error("an untracked file left the checkout clean")
	}
	os.Remove(filepath.Join(dir, "new.go"))
	write("a.go", "package a // changed\n")
	if _, clean := checkoutRevision(ctx, dir); clean {
		t.Error("a changed file left the checkout clean")
	}
	if _, clean := checkoutRevision(ctx, t.TempDir()); clean {
		t.Error("a directory outside any checkout counted as clean")
	}
	if _, clean := checkoutRevision(ctx, ""); clean {
		t.Error("no directory counted as clean")
	}
}
