package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/mspipe/mspipe/spec"
	"github.com/spf13/cobra"
)

// loadedSpec is a validated spec ready to plan or run.
type loadedSpec struct {
	p      *spec.Pipeline
	data   []byte
	env    *catalog.Catalog
	params map[string]any
}

// loadSpec reads, validates and parameterizes a spec for run and plan.
// Problems are printed to w; the error is then failed() (exit 1). Running
// and planning start the plugins anyway (plan asks each for its version,
// part of the cache key), so validation may start them all.
func loadSpec(w io.Writer, path string, rawParams []string) (*loadedSpec, error) {
	return loadSpecFor(w, path, rawParams, catalog.ExecAll)
}

// loadSpecFor is loadSpec for a command that starts only the plugin
// binaries policy allows, such as graph.
func loadSpecFor(w io.Writer, path string, rawParams []string, policy catalog.ExecPolicy) (*loadedSpec, error) {
	data, err := userfile.ReadFile(context.Background(), path, spec.MaxFileSize)
	if err != nil {
		return nil, usageErr(fmt.Errorf("read spec %s: %w", path, err))
	}
	res := validateFileParams(path, policy, rawParams)
	if res.Err != nil {
		return nil, usageErr(res.Err)
	}
	for _, prob := range res.Diagnostics {
		fmt.Fprintln(w, prob.Error())
	}
	if !res.Valid() {
		fmt.Fprintf(w, "%s: invalid spec, nothing was run\n", path)
		return nil, failed()
	}
	p, _, err := spec.Load(path)
	if err != nil {
		return nil, usageErr(err)
	}
	env, err := newCatalog(p.BaseDir, policy)
	if err != nil {
		return nil, err
	}
	env.UsePins(p)
	if errs := spec.Validate(p, env, specOptionsFor(p, rawParams)); errs.Err() != nil {
		return nil, errs.Err() // cannot happen: validateFile accepted it
	}
	params, err := paramValues(p, rawParams)
	if err != nil {
		return nil, usageErr(err)
	}
	return &loadedSpec{p: p, data: data, env: env, params: params}, nil
}

// paramValues combines the params' defaults with -p name=value overrides.
func paramValues(p *spec.Pipeline, raw []string) (map[string]any, error) {
	out := map[string]any{}
	for _, prm := range p.Params {
		if prm.Default != nil {
			out[prm.Name] = prm.Default
		}
	}
	var names []string
	for _, prm := range p.Params {
		names = append(names, prm.Name)
	}
	for _, kv := range raw {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-p %q: write name=value", kv)
		}
		prm := p.Param(name)
		if prm == nil {
			known := "the spec declares no params"
			if len(names) > 0 {
				known = "params: " + strings.Join(names, ", ")
			}
			return nil, fmt.Errorf("-p %s: the spec has no param %q (%s)", kv, name, known)
		}
		v, err := spec.ParseParam(prm, value)
		if err != nil {
			return nil, fmt.Errorf("-p %s: %w", kv, err)
		}
		if path, ok := v.(string); ok && prm.Type == spec.TypePath && path != "" {
			// A command-line path is relative to where the command runs;
			// the spec's own defaults resolve against its directory.
			if v, err = filepath.Abs(path); err != nil {
				return nil, fmt.Errorf("-p %s: %w", kv, err)
			}
		}
		out[name] = v
	}
	var missing []string
	for _, prm := range p.Params {
		if _, ok := out[prm.Name]; !ok {
			missing = append(missing, prm.Name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("params without a default need a value: %s (use -p name=value)", strings.Join(missing, ", "))
	}
	return out, nil
}

// rankTableInfo gives the engine the size of a rank table cluster.
func rankTableInfo(path string) (devices, hosts int, err error) {
	t, problems, err := loadRankTable(path)
	if err != nil {
		return 0, 0, err
	}
	if problems.HasErrors() {
		return 0, 0, fmt.Errorf("rank table %s is invalid: %v", path, problems.Err())
	}
	return t.RankSize(), len(t.ServerList), nil
}

// runsDir is where runs are kept: --runs-dir, else $MSPIPE_RUNS_DIR, else ./runs.
func runsDir(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("runs-dir"); f != nil && f.Changed {
		return f.Value.String()
	}
	if d := os.Getenv("MSPIPE_RUNS_DIR"); d != "" {
		return d
	}
	return "runs"
}

func addRunsDirFlag(cmd *cobra.Command) {
	cmd.Flags().String("runs-dir", "runs", "directory of run records (also $MSPIPE_RUNS_DIR)")
}

// processEnv is what ${{ env.NAME }} reads.
func processEnv() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// runExit maps an engine error to the CLI's exit codes.
func runExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pipeline.ErrStageFailed):
		return failed()
	}
	return err
}

// checkJobs refuses a --jobs that would run nothing (0) or mean nothing
// (negative): the engine would quietly take 1.
func checkJobs(jobs int) error {
	if jobs < 1 {
		return usageErr(fmt.Errorf("--jobs %d: at least 1 stage must be able to run", jobs))
	}
	return nil
}
