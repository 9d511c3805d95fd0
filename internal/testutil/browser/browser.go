// Package browser finds a headless Chromium for the tests that check what
// a browser makes of mspipe's HTML report, and runs it the one way they
// need: its own throwaway profile, no network services, a time limit.
//
//	chromium := browser.Find()
//	if chromium == "" {
//		t.Log("SKIP of the browser check: no chromium found")
//		return
//	}
//	dom := browser.Run(t, chromium, "--dump-dom", "file://"+page)
package browser

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Find returns the Chromium to render with: $MSPIPE_CHROMIUM, else
// Debian's /usr/bin/chromium, else chromium, chromium-browser or
// google-chrome on PATH; "" when there is none.
func Find() string {
	if p := os.Getenv("MSPIPE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// runLimit bounds one Chromium run.
const runLimit = 2 * time.Minute

// Run runs chromium headless with args, on a profile in a t.TempDir() and
// without its background network services, and returns its stdout. A
// failure, or a run past two minutes, fails the test with its stderr.
func Run(t testing.TB, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", chromium, args, err, stderr.String())
	}
	return stdout.String()
}
