package host

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

func writeExe(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	specDir := filepath.Join(root, "pipelines")
	local := filepath.Join(root, "plugins")
	extra := filepath.Join(root, "extra")
	config := filepath.Join(root, "config")
	custom := writeExe(t, filepath.Join(specDir, "bin", "custom"), 0o755)
	writeExe(t, filepath.Join(specDir, "bin", "plain.txt"), 0o644)
	augLocal := writeExe(t, filepath.Join(local, "mspipe-stage-acme-augment"), 0o755)
	augExtra := writeExe(t, filepath.Join(extra, "mspipe-stage-acme-augment"), 0o755)
	execShadow := writeExe(t, filepath.Join(config, "mspipe-stage-exec"), 0o755)
	writeExe(t, filepath.Join(extra, "mspipe-stage-notexec"), 0o644)

	reg := NewRegistry()
	if err := reg.Register(plugins.Info{Name: "exec", New: newFake}); err != nil {
		t.Fatal(err)
	}
	r := &Resolver{
		Builtins:   reg,
		Executable: "/usr/bin/mspipe",
		SpecDir:    specDir,
		SearchPath: []SearchDir{{local, OriginLocalDir}, {extra, OriginPluginPath}, {config, OriginConfigDir}},
	}
	tests := []struct {
		uses string
		want Resolved
	}{
		{"exec", Resolved{Uses: "exec", Name: "exec", Builtin: true, Path: "/usr/bin/mspipe", Args: []string{"__stage", "exec"},
			Origin: OriginBuiltin, Shadowed: []string{execShadow}}},
		{"acme/augment", Resolved{Uses: "acme/augment", Name: "acme/augment", Path: augLocal, Origin: OriginLocalDir, Shadowed: []string{augExtra}}},
		{"./bin/custom", Resolved{Uses: "./bin/custom", Path: custom, Origin: OriginUsesPath}},
		{"../pipelines/bin/custom", Resolved{Uses: "../pipelines/bin/custom", Path: custom, Origin: OriginUsesPath}},
		{custom, Resolved{Uses: custom, Path: custom, Origin: OriginUsesPath}},
	}
	for _, tt := range tests {
		t.Run(tt.uses, func(t *testing.T) {
			got, err := r.Resolve(tt.uses)
			if err != nil {
				t.Fatal(err)
			}
			if got.Uses != tt.want.Uses || got.Name != tt.want.Name || got.Builtin != tt.want.Builtin || got.Path != tt.want.Path ||
				!slices.Equal(got.Args, tt.want.Args) || got.Origin != tt.want.Origin || !slices.Equal(got.Shadowed, tt.want.Shadowed) {
				t.Errorf("Resolve(%q) =\n %+v, want\n %+v", tt.uses, got, tt.want)
			}
			cfg := got.LaunchConfig()
			if cfg.Path != got.Path || cfg.Name != got.Name || !slices.Equal(cfg.Args, got.Args) {
				t.Errorf("LaunchConfig = %+v", cfg)
			}
		})
	}
	if s := (Resolved{Uses: "exec", Builtin: true}).String(); s != "exec (built-in)" {
		t.Errorf("String = %q", s)
	}

	failures := []struct {
		uses    string
		wantErr error
		text    []string
	}{
		{"acme/missing", ErrStageNotFound, []string{"no built-in stage has this name (built-ins: exec)", "no executable mspipe-stage-acme-missing in " + local + ", " + extra}},
		{"notexec", ErrStageNotFound, []string{"mspipe-stage-notexec is not executable (chmod +x it)"}},
		{"Bad/Name", plugins.ErrInvalidName, []string{`uses "Bad/Name"`}},
		{"./bin/nothing", os.ErrNotExist, []string{"bin/nothing"}},
		{"./bin/plain.txt", nil, []string{"is not executable"}},
		{"./bin", nil, []string{"is not a regular file"}},
	}
	for _, tt := range failures {
		t.Run(tt.uses, func(t *testing.T) {
			_, err := r.Resolve(tt.uses)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, want := range tt.text {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestDefaultSearchPath(t *testing.T) {
	t.Setenv("MSPIPE_PLUGIN_PATH", "/a"+string(os.PathListSeparator)+string(os.PathListSeparator)+"/b")
	t.Setenv("XDG_CONFIG_HOME", "/cfg")
	got := DefaultSearchPath()
	want := []SearchDir{{"plugins", OriginLocalDir}, {"/a", OriginPluginPath}, {"/b", OriginPluginPath}, {"/cfg/mspipe/plugins", OriginConfigDir}}
	if !slices.Equal(got, want) {
		t.Errorf("DefaultSearchPath = %v, want %v", got, want)
	}
}

func TestResolveWithoutBuiltins(t *testing.T) {
	r := &Resolver{}
	_, err := r.Resolve("exec")
	if !errors.Is(err, ErrStageNotFound) || strings.Contains(err.Error(), "built-ins:") {
		t.Errorf("err = %v", err)
	}
}
