package cli

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
)

func TestBuiltinStagesRegistersExec(t *testing.T) {
	reg, err := builtinStages()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reg.Names(), "exec") {
		t.Errorf("built-ins = %v, want exec among them", reg.Names())
	}
}

func TestStageServeByHand(t *testing.T) {
	t.Setenv(plugins.MagicCookieKey, "")
	tests := []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"__stage", "exec"}, ExitFailed, `serves the built-in stage "exec" to mspipe itself`},
		{[]string{"__stage", "no/such"}, ExitUsage, `no built-in stage "no/such" (built-ins: `},
		{[]string{"__stage"}, ExitUsage, "accepts 1 arg"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantErr) {
			t.Errorf("mspipe %v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr.String(), tt.wantCode, tt.wantErr)
		}
	}
	var help bytes.Buffer
	Main(context.Background(), []string{"--help"}, &help, &help)
	if strings.Contains(help.String(), "__stage") {
		t.Errorf("__stage shows in --help:\n%s", help.String())
	}
}

// TestBuiltinStageServedByMspipe runs the built-in exec stage the way a
// pipeline does: the real mspipe binary re-executed as `mspipe __stage exec`.
func TestBuiltinStageServedByMspipe(t *testing.T) {
	ctx := context.Background()
	cfg := builtinExecStage(t)
	var log bytes.Buffer
	cfg.Log = &log
	c, err := host.Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	work := t.TempDir()
	var lines []string
	out, err := c.Run(ctx, plugins.RunRequest{StageID: "hello", WorkDir: work,
		With: map[string]any{"command": `echo "hi from $MSPIPE_STAGE_ID"; echo "n=2" >> "$MSPIPE_OUTPUT"; ` +
			`if [ -n "${MSPIPE_PLUGIN_TLS+set}" ]; then echo tls=inherited; else echo tls=absent; fi >> "$MSPIPE_OUTPUT"`}},
		func(e plugins.Event) {
			if e.Log != nil && e.Log.Fields["stream"] == "stdout" {
				lines = append(lines, e.Log.Message)
			}
		})
	if err != nil {
		c.Close() // no more writes to log
		t.Fatalf("run: %v\nstage log:\n%s", err, log.String())
	}
	if out["stdout"] != "hi from hello\n" || out["exit_code"] != int64(0) || out["n"] != int64(2) {
		t.Errorf("outputs = %#v", out)
	}
	if out["tls"] != "absent" { // the plugin's TLS key stays in the plugin
		t.Errorf("the command sees %s: %v", plugins.EnvTLS, out["tls"])
	}
	if !slices.Equal(lines, []string{"hi from hello"}) {
		t.Errorf("stdout events = %q", lines)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBuiltinStage measures a built-in stage's whole life, as
// BenchmarkEmptyStage in plugins does for an SDK plugin: start of the
// mspipe binary as `mspipe __stage exec`, handshake, Run of the command
// `true`, stop. The mspipe binary links everything the host needs, so its
// start costs more than a small plugin's.
func BenchmarkBuiltinStage(b *testing.B) {
	cfg := builtinExecStage(b)
	ctx := context.Background()
	req := plugins.RunRequest{StageID: "s", WorkDir: b.TempDir(), With: map[string]any{"command": []any{"true"}}}
	for b.Loop() {
		c, err := host.Launch(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Run(ctx, req, nil); err != nil {
			b.Fatal(err)
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// builtinExecStage builds the mspipe binary and returns the launch
// configuration of its built-in exec stage, as a pipeline resolves it.
func builtinExecStage(tb testing.TB) host.LaunchConfig {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "mspipe")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../../cmd/mspipe").CombinedOutput(); err != nil {
		tb.Fatalf("build mspipe: %v\n%s", err, out)
	}
	reg, err := builtinStages()
	if err != nil {
		tb.Fatal(err)
	}
	res, err := (&host.Resolver{Builtins: reg, Executable: bin}).Resolve("exec")
	if err != nil {
		tb.Fatal(err)
	}
	return res.LaunchConfig()
}
