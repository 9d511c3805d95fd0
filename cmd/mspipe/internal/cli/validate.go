package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/internal/diag"
	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/mspipe/mspipe/spec"
	"github.com/spf13/cobra"
)

func newValidateCmd() *cobra.Command {
	var format, execPlugins string
	var strict bool
	cmd := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check pipeline specs without running anything",
		Long: `Check pipeline specs: YAML syntax, structure, types, needs (unknown stages,
cycles), expressions (unknown names, types, reading a stage's outputs without
needing it), each stage's inputs against the schema its plugin declares, rank
table files named by a cluster, and then each stage's own checks (its plugin's
Validate), given the stage's cluster (its devices and rank table) and the
inputs known before a run: static values and expressions of params (their
defaults) and cluster; inputs that need other stages' outputs or run data are
named to the plugin as unknown. A plugin that fails to check is a warning.

Built-in stages are part of mspipe and always checked. A plugin binary
(uses: ./path, or a name found in ./plugins, $MSPIPE_PLUGIN_PATH or the user
config dir) has to be started to learn its with schema and outputs, so
validate starts it only when the stage pins it with sha256: (checked before
it starts; a mismatch is an error) or with --exec-plugins. Otherwise the stage's with is not checked,
its outputs may be read under any name, and a warning at its uses says so.

A plugin name that is not built yet, but whose Go source is next to the
spec (a main package in plugins/NAME or examples/plugins/NAME under the
spec's directory), is a warning that gives the go build command to run,
so a fresh clone validates; with --strict it is an error. A name with no
built-in, no binary and no such source is an error (a typo).
--exec-plugins=never starts no binary even when pinned: a pin is written by
whoever writes the spec, so it protects against a changed binary, not
against an untrusted spec that brings its own.

PATH may be a file, a directory (every *.yaml and *.yml below it) or a glob.
Every problem is reported, not only the first, as file:line:col.
--format json prints {"valid", "files": [{"file", "valid", "problems":
[{"file", "line", "col", "severity", "code", "message"}]}]}; code names the
problems after which a file is not checked further (yaml-syntax, spec-empty,
spec-not-text, spec-too-large, spec-too-complex) and is left out otherwise.

Exit status: 0 all specs valid (warnings allowed), 1 a spec is invalid,
2 usage error or a file that cannot be read.`,
		Example: `  mspipe validate examples/
  mspipe validate 'pipelines/*.yaml' --format github   # annotations in GitHub Actions
  mspipe validate two-stage-training.yaml --format json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := diag.ParseFormat(format)
			if err != nil {
				return usageErr(fmt.Errorf("--format: %w", err))
			}
			files, err := expandSpecPaths(args)
			if err != nil {
				return usageErr(err)
			}
			policy, ok := execPolicies[execPlugins]
			if !ok {
				return usageErr(fmt.Errorf("--exec-plugins %q: want pinned, all or never", execPlugins))
			}
			results := make([]diag.Result, 0, len(files))
			for _, f := range files {
				results = append(results, checkSpecFile(f, policy, nil, !strict))
			}
			return reportResults(cmd, diag.Reporter{Format: f, One: "file", Many: "files"}, results)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json or github (GitHub Actions annotations)")
	cmd.Flags().StringVar(&execPlugins, "exec-plugins", "pinned", "which plugin binaries to start to check their stages: pinned (by sha256), all (also the bare flag) or never")
	cmd.Flags().Lookup("exec-plugins").NoOptDefVal = "all"
	cmd.Flags().BoolVar(&strict, "strict", false, "a plugin whose source is next to the spec but whose binary is not built is an error, not a warning")
	return cmd
}

// reportResults prints the results of `validate` or `ranktable validate`
// and decides the exit status: 2 when a file could not be read (usage or
// I/O), 1 when one is invalid.
func reportResults(cmd *cobra.Command, r diag.Reporter, results []diag.Result) error {
	if err := r.Report(cmd.OutOrStdout(), cmd.ErrOrStderr(), results); err != nil {
		return usageErr(err)
	}
	for _, res := range results {
		if res.Err != nil {
			return &exitError{Code: ExitUsage} // already printed
		}
	}
	if !diag.AllValid(results) {
		return failed()
	}
	return nil
}

// execPolicies are the values of validate's --exec-plugins.
var execPolicies = map[string]catalog.ExecPolicy{"pinned": catalog.ExecPinned, "all": catalog.ExecAll, "never": catalog.ExecNever}

// validateFile decodes and checks one spec as validate does by default,
// starting the plugin binaries policy allows to read what they declare.
func validateFile(path string, policy catalog.ExecPolicy) diag.Result {
	return checkSpecFile(path, policy, nil, true)
}

// validateFileParams checks a spec for a command given -p name=value
// params (run, plan): the stages' own checks see those values instead of
// the defaults. Such a command needs every plugin built, so one that is
// not is an error.
func validateFileParams(path string, policy catalog.ExecPolicy, rawParams []string) diag.Result {
	return checkSpecFile(path, policy, rawParams, false)
}

// checkSpecFile decodes and checks one spec. With allowUnbuilt a plugin
// whose source is next to the spec but whose binary is not built is a
// warning that says how to build it (catalog.Catalog.AllowUnbuilt).
func checkSpecFile(path string, policy catalog.ExecPolicy, rawParams []string, allowUnbuilt bool) diag.Result {
	p, problems, err := spec.Load(path)
	if err != nil {
		return diag.Result{File: path, Err: err}
	}
	if spec.Decoded(problems) {
		env, err := newCatalog(p.BaseDir, policy)
		if err != nil {
			return diag.Result{File: path, Err: err}
		}
		defer env.Close() // the plugin processes kept for the stages' own checks
		env.UsePins(p)
		if allowUnbuilt {
			env.AllowUnbuilt()
		}
		problems = append(problems, spec.Validate(p, env, specOptionsFor(p, rawParams))...)
	}
	problems.Sort()
	return diag.Result{File: path, Diagnostics: problems}
}

// specOptions wires the checks spec delegates to other packages.
func specOptions() spec.Options {
	return spec.Options{CheckRankTable: checkRankTableForSpec, Env: processEnv()}
}

// specOptionsFor is specOptions with the values of -p name=value params.
// A -p that names no param or does not parse is left out: paramValues
// reports it to the user.
func specOptionsFor(p *spec.Pipeline, rawParams []string) spec.Options {
	opts := specOptions()
	for _, kv := range rawParams {
		name, value, _ := strings.Cut(kv, "=")
		prm := p.Param(name)
		if prm == nil {
			continue
		}
		if v, err := spec.ParseParam(prm, value); err == nil {
			if opts.Params == nil {
				opts.Params = map[string]any{}
			}
			opts.Params[name] = v
		}
	}
	return opts
}

// expandSpecPaths turns files, directories and globs into a sorted list of
// spec files. A path that matches nothing is an error.
func expandSpecPaths(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, arg := range args {
		matches := []string{arg}
		if strings.ContainsAny(arg, "*?[") {
			m, err := filepath.Glob(arg)
			if err != nil {
				return nil, fmt.Errorf("bad pattern %q: %w", arg, err)
			}
			if len(m) == 0 {
				return nil, fmt.Errorf("%s: no files match", arg)
			}
			matches = m
		}
		for _, m := range matches {
			st, err := os.Stat(m)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("%s: no such file or directory", m)
				}
				return nil, err
			}
			if !st.IsDir() {
				add(m)
				continue
			}
			n := 0
			err = filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() && p != m && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
					add(p)
					n++
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			if n == 0 {
				return nil, fmt.Errorf("%s: no *.yaml or *.yml files in this directory", m)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
