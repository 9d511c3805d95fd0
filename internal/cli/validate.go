package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/spec"
	"github.com/spf13/cobra"
)

func newValidateCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check pipeline specs without running anything",
		Long: `Check pipeline specs: YAML syntax, structure, types, needs (unknown stages,
cycles), expressions (unknown names, types, reading a stage's outputs without
needing it), each stage's inputs against the schema its plugin declares, and
rank table files named by a cluster.

PATH may be a file, a directory (every *.yaml and *.yml below it) or a glob.
Every problem is reported, not only the first, as file:line:col.

Exit status: 0 all specs valid (warnings allowed), 1 a spec is invalid,
2 usage error or a file that cannot be read.`,
		Example: `  mspipe validate examples/
  mspipe validate 'pipelines/*.yaml' --format github   # annotations in GitHub Actions
  mspipe validate two-stage-training.yaml --format json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			report, ok := reporters[format]
			if !ok {
				return usageErr(fmt.Errorf("--format: unknown format %q (text, json or github)", format))
			}
			files, err := expandSpecPaths(args)
			if err != nil {
				return usageErr(err)
			}
			results := make([]fileResult, 0, len(files))
			ioFailed := false
			for _, f := range files {
				res := validateFile(f)
				ioFailed = ioFailed || res.ioErr != nil
				results = append(results, res)
			}
			if err := report(cmd.OutOrStdout(), cmd.ErrOrStderr(), results); err != nil {
				return usageErr(err)
			}
			switch {
			case ioFailed:
				return &exitError{Code: ExitUsage}
			case anyInvalid(results):
				return failed()
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json or github (GitHub Actions annotations)")
	return cmd
}

// fileResult is the outcome of validating one spec file.
type fileResult struct {
	file     string
	problems spec.ErrorList
	ioErr    error
}

func (r fileResult) valid() bool { return r.ioErr == nil && r.problems.Err() == nil }

func anyInvalid(rs []fileResult) bool {
	for _, r := range rs {
		if !r.valid() {
			return true
		}
	}
	return false
}

// validateFile decodes and checks one spec.
func validateFile(path string) fileResult {
	p, problems, err := spec.Load(path)
	if err != nil {
		return fileResult{file: path, ioErr: err}
	}
	if decodable(problems) {
		env, err := newStageEnv(p.BaseDir)
		if err != nil {
			return fileResult{file: path, ioErr: err}
		}
		env.UsePins(p)
		problems = append(problems, spec.Validate(p, env, specOptions())...)
	}
	problems.Sort()
	return fileResult{file: path, problems: problems}
}

// decodable reports whether the file was read as YAML at all, so semantic
// checks make sense.
func decodable(problems spec.ErrorList) bool {
	for _, e := range problems {
		if errors.Is(e, spec.ErrSyntax) || errors.Is(e, spec.ErrTooLarge) || errors.Is(e, spec.ErrTooComplex) || strings.HasPrefix(e.Msg, "empty spec") || strings.HasPrefix(e.Msg, "not a text file") {
			return false
		}
	}
	return true
}

// specOptions wires the checks spec delegates to other packages.
func specOptions() spec.Options {
	return spec.Options{CheckRankTable: checkRankTableForSpec}
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

type reporter func(stdout, stderr io.Writer, results []fileResult) error

var reporters = map[string]reporter{
	"text":   reportText,
	"json":   reportJSON,
	"github": reportGitHub,
}

func counts(results []fileResult) (invalid, errs, warns int) {
	for _, r := range results {
		if !r.valid() {
			invalid++
		}
		if r.ioErr != nil {
			errs++
		}
		for _, p := range r.problems {
			if p.IsWarning() {
				warns++
			} else {
				errs++
			}
		}
	}
	return
}

func reportText(stdout, stderr io.Writer, results []fileResult) error {
	for _, r := range results {
		if r.ioErr != nil {
			fmt.Fprintf(stdout, "%s: error: %s\n", r.file, ioMessage(r.ioErr))
		}
		for _, p := range r.problems {
			fmt.Fprintln(stdout, p.Error())
		}
	}
	invalid, errs, warns := counts(results)
	summary := fmt.Sprintf("%d %s checked", len(results), plural(len(results), "file", "files"))
	if invalid == 0 {
		summary += ": all valid"
	} else {
		summary += fmt.Sprintf(": %d invalid, %d %s", invalid, errs, plural(errs, "error", "errors"))
	}
	if warns > 0 {
		summary += fmt.Sprintf(", %d %s", warns, plural(warns, "warning", "warnings"))
	}
	fmt.Fprintln(stderr, summary)
	return nil
}

// ioMessage is err's text without the file name, which the caller prints
// in front of it.
func ioMessage(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

type jsonProblem struct {
	File     string `json:"file"`
	Line     int    `json:"line,omitempty"`
	Col      int    `json:"col,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

type jsonFile struct {
	File     string        `json:"file"`
	Valid    bool          `json:"valid"`
	Problems []jsonProblem `json:"problems"`
}

func reportJSON(stdout, _ io.Writer, results []fileResult) error {
	out := struct {
		Valid bool       `json:"valid"`
		Files []jsonFile `json:"files"`
	}{Valid: !anyInvalid(results)}
	for _, r := range results {
		jf := jsonFile{File: r.file, Valid: r.valid(), Problems: []jsonProblem{}}
		if r.ioErr != nil {
			jf.Problems = append(jf.Problems, jsonProblem{File: r.file, Severity: "error", Message: r.ioErr.Error()})
		}
		for _, p := range r.problems {
			jf.Problems = append(jf.Problems, jsonProblem{File: p.Pos.File, Line: p.Pos.Line, Col: p.Pos.Col, Severity: string(p.Severity), Message: p.Msg})
		}
		out.Files = append(out.Files, jf)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// reportGitHub prints workflow commands that GitHub Actions turns into
// annotations on the pull request's diff.
func reportGitHub(stdout, stderr io.Writer, results []fileResult) error {
	for _, r := range results {
		if r.ioErr != nil {
			fmt.Fprintf(stdout, "::error file=%s::%s\n", ghProperty(r.file), ghData(r.ioErr.Error()))
		}
		for _, p := range r.problems {
			fmt.Fprintln(stdout, githubAnnotation(string(p.Severity), p.Pos.File, p.Pos.Line, p.Pos.Col, p.Msg))
		}
	}
	return reportSummaryOnly(stderr, results)
}

func githubAnnotation(severity, file string, line, col int, msg string) string {
	s := fmt.Sprintf("::%s file=%s", severity, ghProperty(file))
	if line > 0 {
		s += fmt.Sprintf(",line=%d", line)
	}
	if col > 0 {
		s += fmt.Sprintf(",col=%d", col)
	}
	return s + "::" + ghData(msg)
}

func reportSummaryOnly(stderr io.Writer, results []fileResult) error {
	return reportText(io.Discard, stderr, results)
}

// ghData and ghProperty escape workflow command values as the GitHub
// Actions toolkit does.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
