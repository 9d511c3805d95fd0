package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// buildSource names what a binary was built from, for the cache key of the
// stages it serves itself (the built-ins): equal for `go run ./cmd/mspipe`
// and an installed mspipe of the same source, where the executables' bytes
// differ (go install stamps the version control state into the binary, go
// run does not, and the linker lays out the rest around that stamp).
//
// In order: a module version with its go.sum hash (go install
// module@version); a clean version control revision stamped into the
// binary (go build or go install in a checkout); for a binary `go run`
// just built, the revision of the checkout it was built from, when that
// checkout is clean. Each comes with the Go version, the build settings and
// every dependency's version and hash. A modified checkout names no source
// a revision could stand for: then ok is false and the caller keys on the
// executable's bytes.
//
// checkout returns the revision of the checkout the running code was built
// from and whether it is clean (checkoutRevision of sourceDir in use).
func buildSource(ctx context.Context, info *debug.BuildInfo, exe string, checkout func(context.Context) (rev string, clean bool)) (source string, ok bool) {
	if info == nil {
		return "", false
	}
	var rev, modified string
	var settings []string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified":
			modified = s.Value
		case strings.HasPrefix(s.Key, "vcs") || s.Key == "-buildvcs":
			// vcs, vcs.time: the same for every build of one revision.
		default:
			settings = append(settings, s.Key+"="+s.Value)
		}
	}
	var what string
	switch {
	case info.Main.Sum != "":
		what = "module " + info.Main.Path + "@" + info.Main.Version + " " + info.Main.Sum
	case rev != "" && modified == "false":
		what = "revision " + rev
	case rev == "" && builtByGoRun(exe):
		r, clean := checkout(ctx)
		if !clean {
			return "", false
		}
		what = "revision " + r
	default:
		return "", false
	}
	var deps []string
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		deps = append(deps, d.Path+"@"+d.Version+" "+d.Sum)
	}
	sort.Strings(settings)
	sort.Strings(deps)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", what, info.GoVersion, strings.Join(settings, "\x00"), strings.Join(deps, "\x00"))
	return what + " build " + hex.EncodeToString(h.Sum(nil)), true
}

// builtByGoRun reports whether exe is where `go run` links the binaries it
// runs: $WORK/b001/exe/NAME, WORK a go-build directory.
func builtByGoRun(exe string) bool {
	return filepath.Base(filepath.Dir(exe)) == "exe" && strings.Contains(exe, string(filepath.Separator)+"go-build")
}

// sourceDir is the directory this file was compiled from, or "" when the
// build trimmed paths (-trimpath).
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Dir(file)
}

// builtFromCheckout is buildSource's checkout: the revision of the checkout
// this file was compiled in.
func builtFromCheckout(ctx context.Context) (string, bool) {
	return checkoutRevision(ctx, sourceDir())
}

// checkoutRevision returns the git revision of the checkout that holds dir
// and whether that checkout is clean by the rule go build stamps
// vcs.modified with (no change, tracked or untracked, that .gitignore does
// not hide). No git, no checkout or a slow git counts as not clean.
func checkoutRevision(ctx context.Context, dir string) (rev string, clean bool) {
	if dir == "" {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil || rev == "" {
		return "", false
	}
	status, err := git("status", "--porcelain")
	if err != nil || status != "" {
		return "", false
	}
	return rev, true
}
