package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/golden"
)

// runCLI runs mspipe in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

const invalidDir = "../../../../spec/testdata/invalid"

func invalidSpecs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(invalidDir, "*.yaml"))
	if err != nil || len(files) < 30 {
		t.Fatalf("want at least 30 invalid specs in %s, found %d (%v)", invalidDir, len(files), err)
	}
	return files
}

// TestValidateInvalidCorpus checks every invalid spec prints its golden
// message at the right line:col and exits 1.
func TestValidateInvalidCorpus(t *testing.T) {
	for _, file := range invalidSpecs(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, "validate", file)
			if code != ExitFailed {
				t.Errorf("exit code = %d, want %d; stderr: %s", code, ExitFailed, stderr)
			}
			if stdout == "" {
				t.Fatalf("no problem reported")
			}
			for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
				if !strings.HasPrefix(line, file+":") && !strings.Contains(line, ".json:") {
					t.Errorf("problem not positioned in the file: %q", line)
				}
			}
			golden.Check(t, strings.TrimSuffix(file, ".yaml")+".golden", []byte(stdout))
		})
	}
}

func TestValidateExamples(t *testing.T) {
	code, stdout, stderr := runCLI(t, "validate", "../../../../examples")
	if code != ExitOK {
		t.Fatalf("validate examples: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "all valid") {
		t.Errorf("summary = %q, want it to say all valid", stderr)
	}
}

// TestValidateAsksTheStage checks that the stages' own checks run, with the
// cluster, and that their problems point into the spec: npu/train refuses
// a device memory it cannot parse at the value of with.device_memory.
func TestValidateAsksTheStage(t *testing.T) {
	src := `version: 1
name: stage-checks
params:
  memory: {type: string, default: 12XB}
cluster: {devices: 2}
stages:
  prepare:
    uses: cifar/prepare
    with: {source: synthetic, shards: "${{ cluster.devices }}"}
  train:
    uses: npu/train
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      mode: data_parallel
      device_memory: 12XB
  again:
    uses: npu/train
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      device_memory: "${{ params.memory }}"
  later:
    uses: npu/train
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      device_memory: "${{ stages.prepare.outputs.dir }}"
`
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "validate", path)
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitFailed, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	// The static value, and the param's default: both at their own
	// line:col. The stage output is known only at run time: no problem.
	want := []string{
		path + ":16:22: error: stages.train.with.device_memory: ",
		path + ":22:22: error: stages.again.with.device_memory: ",
	}
	if len(lines) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", stdout, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) || !strings.Contains(lines[i], "12XB") {
			t.Errorf("problem %d = %q, want it to start with %q and name 12XB", i, lines[i], w)
		}
	}

	// validate checks a param's default; a command that takes -p values
	// checks those instead.
	fixed := strings.Replace(src, "device_memory: 12XB", "device_memory: 512MiB", 1)
	if err := os.WriteFile(path, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runCLI(t, "validate", path)
	if code != ExitFailed || !strings.HasPrefix(stdout, path+":22:22: error: stages.again.with.device_memory: ") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("default 12XB: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr := runCLI(t, "plan", path, "-p", "memory=1GiB"); code != ExitOK {
		t.Errorf("plan -p memory=1GiB: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI(t, "plan", path, "-p", "memory=3QB"); code != ExitFailed || !strings.Contains(stdout+stderr, `:22:22: error: stages.again.with.device_memory: device memory "3QB"`) {
		t.Errorf("plan -p memory=3QB: exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestValidateTooLargeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	data := bytes.Repeat([]byte("# 64 bytes of padding padding padding padding padding padding...\n"), 10<<20/64)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runCLI(t, "validate", path)
	if code != ExitFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	want := fmt.Sprintf("%s: error: file is %d bytes, larger than the 4194304-byte limit for a spec\n", path, len(data))
	if stdout != want {
		t.Errorf("got %q, want %q", stdout, want)
	}
}

func TestValidateUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no args", []string{"validate"}, "requires at least 1 arg"},
		{"missing file", []string{"validate", "no/such/file.yaml"}, "no/such/file.yaml: no such file or directory"},
		{"bad format", []string{"validate", "--format", "xml", "../../../../examples"}, `unknown format "xml"`},
		{"empty glob", []string{"validate", "../../../../examples/*.nothing"}, "no files match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
		})
	}
}

func TestValidateFormats(t *testing.T) {
	file := filepath.Join(invalidDir, "devices-3.yaml")
	code, stdout, _ := runCLI(t, "validate", "--format", "github", file)
	if code != ExitFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	want := "::error file=" + file + ",line=3,col=20::cluster.devices: HCCL supports 1, 2, 4 or 8 devices on one host, not 3\n"
	if stdout != want {
		t.Errorf("github format:\n got %q\nwant %q", stdout, want)
	}

	code, stdout, _ = runCLI(t, "validate", "--format", "json", file, "../../../../examples/two-stage-training.yaml")
	if code != ExitFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	var report struct {
		Valid bool
		Files []struct {
			File     string
			Valid    bool
			Problems []struct {
				File, Severity, Message string
				Line, Col               int
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("json output does not parse: %v\n%s", err, stdout)
	}
	if report.Valid || len(report.Files) != 2 {
		t.Fatalf("report = %+v, want invalid with 2 files", report)
	}
	bad, good := report.Files[1], report.Files[0]
	if bad.File != file {
		bad, good = good, bad
	}
	if bad.Valid || len(bad.Problems) != 1 || bad.Problems[0].Line != 3 || bad.Problems[0].Col != 20 || bad.Problems[0].Severity != "error" {
		t.Errorf("invalid file entry = %+v", bad)
	}
	if !good.Valid || len(good.Problems) != 0 {
		t.Errorf("valid file entry = %+v", good)
	}
}

// TestValidateUnbuiltPlugin checks the rule for a fresh clone: a plugin
// name whose Go source is next to the spec but is not built is a warning
// giving the build command (exit 0), an error with --strict, and a name
// with no source is an error whatever the flags.
func TestValidateUnbuiltPlugin(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "plugins", "shade")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := func(uses string) string {
		path := filepath.Join(dir, uses+".yaml")
		body := "version: 1\nname: unbuilt\nstages:\n  shade:\n    uses: " + uses + "\n    with: {level: 3}\n" +
			"  show:\n    uses: exec\n    needs: shade\n    with: {command: \"echo ${{ stages.shade.outputs.count }}\"}\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good, typo := spec("shade"), spec("shaed")
	// The source is outside the current directory, so it is named by its
	// absolute path.
	wantCmd := "`go build -o plugins/mspipe-stage-shade " + filepath.ToSlash(src) + "`"

	code, stdout, stderr := runCLI(t, "validate", good)
	if code != ExitOK || !strings.Contains(stdout, good+":5:11: warning: stages.shade.uses:") || !strings.Contains(stdout, wantCmd) {
		t.Errorf("validate unbuilt plugin: exit %d, want %d and a warning at 4:11 naming %q\n%s%s", code, ExitOK, wantCmd, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "validate", "--strict", good)
	if code != ExitFailed || !strings.Contains(stdout, good+":5:11: error: stages.shade.uses: plugin \"shade\" is not built") || !strings.Contains(stdout, wantCmd) {
		t.Errorf("validate --strict unbuilt plugin: exit %d, want %d and an error naming %q\n%s%s", code, ExitFailed, wantCmd, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "validate", typo)
	if code != ExitFailed || !strings.Contains(stdout, typo+":5:11: error: stages.shade.uses: unknown stage \"shaed\"") {
		t.Errorf("validate a typo: exit %d, want %d and an unknown stage error\n%s%s", code, ExitFailed, stdout, stderr)
	}
	// run needs the binary: the same spec is refused before anything starts.
	code, stdout, stderr = runCLI(t, "run", "--runs-dir", filepath.Join(dir, "runs"), good)
	if code != ExitFailed || !strings.Contains(stdout+stderr, wantCmd) || !strings.Contains(stdout+stderr, "nothing was run") {
		t.Errorf("run unbuilt plugin: exit %d, want %d, the build command and nothing run\n%s%s", code, ExitFailed, stdout, stderr)
	}
}
