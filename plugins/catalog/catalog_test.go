package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mspipe/mspipe/internal/procgroup"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/spec"
)

const mergeDeclaration = `{"name": "ckpt/merge", "description": "Merge slices.",
	"with": {"type": "object"}, "outputs": [{"name": "checkpoint", "type": "path", "description": "the file"}]}`

// testCatalog has the built-in "exec" (served by a fake mspipe binary), the
// declared "ckpt/merge" and a declaration of "exec" that the built-in wins
// over; specDir and the search path are empty directories.
func testCatalog(t *testing.T, search ...host.SearchDir) (*Catalog, string) {
	t.Helper()
	reg := host.NewRegistry()
	execDesc := plugins.Descriptor{Name: "exec", Version: "1.0.0", Description: "Run a command.",
		WithSchema: json.RawMessage(`{"type":"object"}`),
		Outputs: []plugins.OutputSpec{
			{Name: "exit_code", Type: plugins.TypeInt},
			{Name: plugins.WildcardOutput, Type: plugins.TypeAny},
		}}
	if err := reg.Register(plugins.Info{Name: "exec", New: func() plugins.Stage { return &declaringStage{desc: execDesc} }}); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(t.TempDir(), "mspipe")
	if err := os.WriteFile(self, []byte("the mspipe binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{
		Resolver:      &host.Resolver{Builtins: reg, Executable: self, SpecDir: t.TempDir(), SearchPath: search},
		Declarations:  [][]byte{[]byte(mergeDeclaration), []byte(`{"name": "exec", "description": "declared"}`)},
		ShellCommands: []string{"exec"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, self
}

func TestCatalogStages(t *testing.T) {
	c, _ := testCatalog(t)
	if got, want := c.Names(), []string{"ckpt/merge", "exec"}; !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	info, err := c.Stage("exec")
	if err != nil {
		t.Fatal(err)
	}
	// The wildcard output is left to the spec's own outputs block.
	if info.Name != "exec" || !info.ShellCommand || len(info.Outputs) != 1 || info.Outputs[0].Name != "exit_code" || info.Outputs[0].Type != spec.Type("int") {
		t.Errorf("exec = %+v", info)
	}
	info, err = c.Stage("ckpt/merge")
	if err != nil {
		t.Fatal(err)
	}
	if string(info.WithSchema) != `{"type": "object"}` || info.ShellCommand || len(info.Outputs) != 1 || info.Outputs[0].Description != "the file" {
		t.Errorf("ckpt/merge = %+v", info)
	}

	_, err = c.Stage("acme/none")
	for _, want := range []string{`unknown stage "acme/none"`, "(built-in: ckpt/merge, exec)", "mspipe-stage-acme-none"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unknown stage: err = %v, want it to contain %q", err, want)
		}
	}
	_, err = c.Stage("./bin/missing")
	if err == nil || err.Error() != "plugin binary ./bin/missing not found (the path is relative to the spec file)" {
		t.Errorf("missing binary: err = %v", err)
	}
	_, err = c.Stage("Bad Name")
	if err == nil || strings.HasPrefix(err.Error(), "uses ") || !strings.Contains(err.Error(), "invalid stage name") {
		t.Errorf("bad name: err = %v, want the name problem without the uses prefix", err)
	}
}

func TestCatalogIdentity(t *testing.T) {
	c, self := testCatalog(t)
	ctx := context.Background()
	p := &spec.Pipeline{}
	got, err := c.Identity(ctx, p, &spec.Stage{ID: "s", Uses: "exec"})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("exec@1.0.0 sha256:%x", sha256.Sum256([]byte("the mspipe binary"))); got != want {
		t.Errorf("Identity = %q, want %q", got, want)
	}
	if err := os.WriteFile(self, []byte("rebuilt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Identity(ctx, p, &spec.Stage{ID: "s", Uses: "exec"}); err != nil || again != got {
		t.Errorf("Identity within one catalog = %q, %v; the binary is hashed once", again, err)
	}

	_, err = c.Identity(ctx, p, &spec.Stage{ID: "m", Uses: "ckpt/merge"})
	if !errors.Is(err, ErrNotImplemented) {
		t.Errorf("Identity of a declared stage = %v, want ErrNotImplemented", err)
	}
	_, err = c.Launch(ctx, p, &spec.Stage{ID: "m", Uses: "ckpt/merge"}, io.Discard)
	if !errors.Is(err, ErrNotImplemented) {
		t.Errorf("Launch of a declared stage = %v, want ErrNotImplemented", err)
	}
}

func TestCatalogBadDeclaration(t *testing.T) {
	_, err := New(Config{Declarations: [][]byte{[]byte(`{"name": `)}})
	if err == nil || !strings.Contains(err.Error(), "built-in stage declaration") {
		t.Errorf("err = %v", err)
	}
}

func TestCatalogPins(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mspipe-stage-test-plugin")
	copyFile(t, testPlugin, bin)
	c, _ := testCatalog(t, host.SearchDir{Dir: dir, Origin: host.OriginPluginPath})
	c.UsePins(&spec.Pipeline{Stages: []*spec.Stage{{ID: "t", Uses: "test/plugin", SHA256: strings.Repeat("0", 64)}}})
	_, err := c.Stage("test/plugin")
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("pinned to another digest: err = %v", err)
	}
}

func TestCatalogList(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	copyFile(t, testPlugin, filepath.Join(first, "mspipe-stage-test-plugin"))
	copyFile(t, testPlugin, filepath.Join(second, "mspipe-stage-test-plugin"))
	writeFile(t, filepath.Join(second, "mspipe-stage-broken"), "#!/bin/sh\n", 0o755) // an empty script
	writeFile(t, filepath.Join(second, "mspipe-stage-plain"), "#!/bin/sh\n", 0o644)  // not executable: not listed
	c, _ := testCatalog(t, host.SearchDir{Dir: first, Origin: host.OriginLocalDir}, host.SearchDir{Dir: second, Origin: host.OriginPluginPath})

	got := c.List(context.Background())
	var rows []string
	for _, l := range got {
		row := fmt.Sprintf("%s %s %s %q", l.Kind, l.Name, l.Version, l.Description)
		if l.Path != "" {
			row += " " + filepath.Base(filepath.Dir(l.Path))
		}
		if l.ShadowedBy != "" {
			row += " shadowed"
		}
		if l.Err != nil {
			row += " err"
		}
		rows = append(rows, row)
	}
	pluginDesc := `"Behaves as its mode says, for tests."`
	want := []string{
		`built-in exec 1.0.0 "Run a command."`,
		`declared ckpt/merge  "Merge slices."`,
		"binary test/plugin 0.1.0 " + pluginDesc + " " + filepath.Base(first),
		"binary broken  \"\" " + filepath.Base(second) + " err",
		"binary test/plugin 0.1.0 " + pluginDesc + " " + filepath.Base(second) + " shadowed",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("List =\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if l := got[4]; l.ShadowedBy != filepath.Join(first, "mspipe-stage-test-plugin") {
		t.Errorf("shadowed by %q", l.ShadowedBy)
	}
	if l := got[3]; !errors.Is(l.Err, plugins.ErrPluginExited) {
		t.Errorf("the empty script: err = %v, want ErrPluginExited", l.Err)
	}
}

func TestCatalogExecPolicy(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, testPlugin, filepath.Join(dir, "mspipe-stage-test-plugin"))
	data, err := os.ReadFile(testPlugin)
	if err != nil {
		t.Fatal(err)
	}
	goodPin := fmt.Sprintf("%x", sha256.Sum256(data))
	marker := filepath.Join(t.TempDir(), "started")
	t.Setenv("TESTPLUGIN_MARKER", marker)

	for _, tc := range []struct {
		name      string
		exec      ExecPolicy
		uses, pin string
		started   bool
		want      string // in the error; "" means none
		unchecked bool
	}{
		{name: "pinned policy, unpinned name", exec: ExecPinned, uses: "test/plugin",
			want: "with: not checked: plugin binary " + filepath.Join(dir, "mspipe-stage-test-plugin") + " was not started to read its declaration: it has no sha256 pin (pin it)", unchecked: true},
		{name: "pinned policy, unpinned path", exec: ExecPinned, uses: "./tool",
			want: "was not started to read its declaration: it has no sha256 pin", unchecked: true},
		{name: "pinned policy, correct pin", exec: ExecPinned, uses: "test/plugin", pin: goodPin, started: true},
		{name: "pinned policy, wrong pin", exec: ExecPinned, uses: "./tool", pin: strings.Repeat("0", 64), want: "checksum mismatch"},
		{name: "never, correct pin", exec: ExecNever, uses: "./tool", pin: goodPin,
			want: "was not started to read its declaration: plugin binaries are not started (pin it)", unchecked: true},
		{name: "all, unpinned", exec: ExecAll, uses: "./tool", started: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(marker)
			c, _ := testCatalog(t, host.SearchDir{Dir: dir, Origin: host.OriginPluginPath})
			c.exec, c.uncheckedNote = tc.exec, "pin it"
			copyFile(t, testPlugin, filepath.Join(c.resolver.SpecDir, "tool"))
			c.UsePins(&spec.Pipeline{Stages: []*spec.Stage{{ID: "t", Uses: tc.uses, SHA256: tc.pin}}})
			info, err := c.Stage(tc.uses)
			switch {
			case tc.want == "" && (err != nil || info.Name != "test/plugin"):
				t.Errorf("Stage = %+v, %v; want the plugin's declaration", info, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Stage err = %v, want it to contain %q", err, tc.want)
			case errors.Is(err, spec.ErrUnchecked) != tc.unchecked:
				t.Errorf("errors.Is(%v, spec.ErrUnchecked) = %v, want %v", err, !tc.unchecked, tc.unchecked)
			}
			if _, err := os.Stat(marker); (err == nil) != tc.started {
				t.Errorf("plugin started = %v, want %v", err == nil, tc.started)
			}
		})
	}

	// Built-in and declared stages, and uses that resolve to nothing, are
	// answered as before: there is nothing to start.
	c, _ := testCatalog(t)
	c.exec = ExecNever
	for _, uses := range []string{"exec", "ckpt/merge"} {
		if info, err := c.Stage(uses); err != nil || info.Name != uses {
			t.Errorf("Stage(%s) under ExecNever = %+v, %v", uses, info, err)
		}
	}
	if _, err := c.Stage("./bin/missing"); err == nil || errors.Is(err, spec.ErrUnchecked) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing binary under ExecNever: err = %v, want not found", err)
	}
}

// checkStage is a built-in whose Validate records its request.
type checkStage struct {
	declaringStage
	got *plugins.ValidateRequest
}

func (s *checkStage) Validate(_ context.Context, req plugins.ValidateRequest) ([]plugins.Problem, error) {
	*s.got = req
	if req.Cluster.Devices == 3 {
		panic("three devices")
	}
	return []plugins.Problem{{Path: "/strategy/fc.matmul", Message: fmt.Sprintf("does not divide %d devices", req.Cluster.Devices)}}, nil
}

func TestCatalogCheckBuiltin(t *testing.T) {
	c, _ := testCatalog(t)
	var got plugins.ValidateRequest
	desc := plugins.Descriptor{Name: "npu/check", Version: "1.0.0"}
	if err := c.registry.Register(plugins.Info{Name: "npu/check", New: func() plugins.Stage {
		return &checkStage{declaringStage: declaringStage{desc: desc}, got: &got}
	}}); err != nil {
		t.Fatal(err)
	}
	info, err := c.Stage("npu/check")
	if err != nil || info.Check == nil {
		t.Fatalf("Stage = %+v, %v; want a Check", info, err)
	}
	req := spec.CheckRequest{With: map[string]any{"mode": "semi_auto_parallel"}, Devices: 8, RankTable: "/specs/t.json", Unknown: []string{"data"}}
	problems, err := info.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := plugins.ValidateRequest{With: req.With, Cluster: plugins.Cluster{Devices: 8, RankTable: "/specs/t.json"}, Unknown: []string{"data"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the stage got %+v, want %+v", got, want)
	}
	if len(problems) != 1 || problems[0] != (spec.CheckProblem{Path: "/strategy/fc.matmul", Message: "does not divide 8 devices"}) {
		t.Errorf("problems = %v", problems)
	}
	// A built-in checks inside mspipe: its panic is an error, not a crash.
	if _, err := info.Check(context.Background(), spec.CheckRequest{Devices: 3}); err == nil || err.Error() != "stage panicked: three devices" {
		t.Errorf("panicking check: err = %v", err)
	}
	// A declared-only stage has no implementation to ask.
	if info, err := c.Stage("ckpt/merge"); err != nil || info.Check != nil {
		t.Errorf("declared stage: %+v, %v; want no Check", info, err)
	}
}

func TestCatalogCheckUsesTheDescribedProcess(t *testing.T) {
	c, _ := testCatalog(t)
	copyFile(t, testPlugin, filepath.Join(c.resolver.SpecDir, "tool"))
	info, err := c.Stage("./tool")
	if err != nil || info.Check == nil {
		t.Fatalf("Stage = %+v, %v", info, err)
	}
	c.mu.Lock()
	kept := c.clients["./tool"]
	c.mu.Unlock()
	if kept == nil {
		t.Fatal("no process kept after Describe")
	}
	pid := kept.client.Pid()
	check := func(req spec.CheckRequest) []spec.CheckProblem {
		t.Helper()
		problems, err := info.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return problems
	}
	for range 2 {
		problems := check(spec.CheckRequest{With: map[string]any{"mode": "check", "name": "x"}, Devices: 8, RankTable: "/t.json"})
		want := []spec.CheckProblem{
			{Path: "/mode", Message: fmt.Sprintf(`pid %d, devices 8, rank table "/t.json", unknown []`, pid)},
			{Path: "/name", Message: "name x"},
		}
		if !reflect.DeepEqual(problems, want) {
			t.Errorf("problems = %v\nwant %v", problems, want)
		}
	}
	// The SDK drops what its check says about an unknown key.
	problems := check(spec.CheckRequest{With: map[string]any{"mode": "check"}, Devices: 4, Unknown: []string{"name"}})
	want := []spec.CheckProblem{{Path: "/mode", Message: fmt.Sprintf(`pid %d, devices 4, rank table "", unknown [name]`, pid)}}
	if !reflect.DeepEqual(problems, want) {
		t.Errorf("problems with name unknown = %v\nwant %v", problems, want)
	}

	// Close stops the process; a later check starts another.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if procgroup.Alive(pid) {
		t.Errorf("plugin process %d still runs after Close", pid)
	}
	problems = check(spec.CheckRequest{With: map[string]any{"mode": "check"}, Devices: 2})
	if len(problems) != 2 || strings.Contains(problems[0].Message, fmt.Sprintf("pid %d,", pid)) || !strings.Contains(problems[0].Message, "devices 2") {
		t.Errorf("after Close: problems = %v, want a new process's answer", problems)
	}

	// A process that died fails the call with an error (validation makes
	// it a warning); the next call starts another.
	c.mu.Lock()
	second := c.clients["./tool"].client.Pid()
	c.mu.Unlock()
	if err := syscall.Kill(second, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := info.Check(context.Background(), spec.CheckRequest{With: map[string]any{"mode": "check"}}); !errors.Is(err, plugins.ErrPluginExited) {
		t.Errorf("check on a killed plugin: err = %v, want plugins.ErrPluginExited", err)
	}
	problems = check(spec.CheckRequest{With: map[string]any{"mode": "check"}, Devices: 1})
	if len(problems) != 2 || strings.Contains(problems[0].Message, fmt.Sprintf("pid %d,", second)) {
		t.Errorf("after the plugin died: problems = %v, want a new process's answer", problems)
	}
}

// TestCatalogUnbuiltPlugin checks that a plugin whose source is next to the
// spec but is not built is an error that says how to build it, unchecked
// (a warning) after AllowUnbuilt, and that a name without a source stays
// an unknown stage either way.
func TestCatalogUnbuiltPlugin(t *testing.T) {
	c, _ := testCatalog(t)
	writeFile(t, filepath.Join(c.resolver.SpecDir, "plugins", "augment", "main.go"), "package main\n", 0o644)
	wantMsg := "plugin \"augment\" is not built: its source is " + filepath.Join(c.resolver.SpecDir, "plugins", "augment") +
		" but there is no executable mspipe-stage-augment"
	wantCmd := "`go build -o plugins/mspipe-stage-augment "

	_, err := c.Stage("augment")
	if err == nil || errors.Is(err, spec.ErrUnchecked) || !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), wantCmd) {
		t.Fatalf("unbuilt plugin, strict: err = %v; want an error containing %q and %q", err, wantMsg, wantCmd)
	}

	c2, _ := testCatalog(t)
	writeFile(t, filepath.Join(c2.resolver.SpecDir, "plugins", "augment", "main.go"), "package main\n", 0o644)
	c2.AllowUnbuilt()
	_, err = c2.Stage("augment")
	if !errors.Is(err, spec.ErrUnchecked) || !strings.Contains(err.Error(), wantCmd) {
		t.Errorf("unbuilt plugin, AllowUnbuilt: err = %v; want spec.ErrUnchecked with %q", err, wantCmd)
	}
	_, err = c2.Stage("augmnet")
	if err == nil || errors.Is(err, spec.ErrUnchecked) || !strings.Contains(err.Error(), `unknown stage "augmnet"`) {
		t.Errorf("typo after AllowUnbuilt: err = %v; want an unknown stage error", err)
	}
	// A path is never taken for a name with a source.
	_, err = c2.Stage("./plugins/augment")
	if err == nil || errors.Is(err, spec.ErrUnchecked) {
		t.Errorf("uses: ./plugins/augment (a directory) after AllowUnbuilt: err = %v; want an error", err)
	}
}
