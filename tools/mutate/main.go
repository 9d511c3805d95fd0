package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/procgroup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.String("list", "tools/mutate/mutations.txt", "the mutation list")
	only := fs.String("only", "", "run only mutations whose name matches this regular expression")
	timeout := fs.Duration("timeout", 10*time.Minute, "go test -timeout for each mutant")
	check := fs.Bool("check", false, "only check that every entry still matches the code (no tests)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := os.Stat("go.mod"); err != nil {
		fmt.Fprintln(stderr, "mutate: run from the module root (no go.mod here)")
		return 2
	}
	f, err := os.Open(*list)
	if err != nil {
		fmt.Fprintf(stderr, "mutate: %v\n", err)
		return 2
	}
	muts, err := parseList(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "mutate: %s: %v\n", *list, err)
		return 2
	}
	pick, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintf(stderr, "mutate: -only: %v\n", err)
		return 2
	}
	var selected []Mutation
	for _, m := range muts {
		if pick.MatchString(m.Name) {
			selected = append(selected, m)
		}
	}
	if *check {
		stale := 0
		for _, m := range selected {
			file, line, _, _, err := locate(m)
			if err != nil {
				stale++
				fmt.Fprintf(stdout, "%s:%d: %s: %v\n", *list, m.Line, m.Name, err)
				continue
			}
			fmt.Fprintf(stdout, "%s:%d: %s: %s:%d\n", *list, m.Line, m.Name, file, line)
		}
		if stale > 0 {
			return 1
		}
		return 0
	}
	r := &runner{timeout: *timeout, log: stderr, baseline: map[string]error{}}
	results := make([]Result, 0, len(selected))
	for i, m := range selected {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(stderr, "[%d/%d] %s\n", i+1, len(selected), m.Name)
		res := r.try(ctx, m)
		if ctx.Err() != nil {
			break // interrupted: the result says nothing
		}
		fmt.Fprintf(stderr, "        %s in %.0fs\n", res.Outcome, res.Seconds)
		results = append(results, res)
	}
	printTable(stdout, results)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "mutate: interrupted; every file was restored")
		return 130
	}
	return 0
}

// Outcomes of one mutant.
const (
	Killed   = "killed"
	Survived = "survived"
	TimedOut = "timeout"
	Invalid  = "invalid"
	Stale    = "stale"
	Baseline = "baseline failed"
)

// Mutation is one entry of the list.
type Mutation struct {
	Name     string
	In       string   // a file, or a package directory
	Tests    []string // packages whose tests judge the mutant
	Run      string   // go test -run, optional
	From, To string
	Line     int // of the entry in the list
}

// Result is what happened to one mutation.
type Result struct {
	Mutation
	Outcome string
	Where   string // file:line mutated
	Detail  string // why stale, invalid or baseline failed
	Seconds float64
}

// parseList reads the mutation list format documented in doc.go.
func parseList(r io.Reader) ([]Mutation, error) {
	var out []Mutation
	var cur *Mutation
	finish := func() error {
		if cur == nil {
			return nil
		}
		switch {
		case cur.In == "":
			return fmt.Errorf("line %d: %q has no in:", cur.Line, cur.Name)
		case len(cur.Tests) == 0:
			return fmt.Errorf("line %d: %q has no test:", cur.Line, cur.Name)
		case strings.TrimSpace(cur.From) == "" || cur.To == "":
			return fmt.Errorf("line %d: %q needs a - line and a + line", cur.Line, cur.Name)
		case cur.From == cur.To:
			return fmt.Errorf("line %d: %q changes nothing", cur.Line, cur.Name)
		}
		out = append(out, *cur)
		cur = nil
		return nil
	}
	sc := bufio.NewScanner(r)
	names := map[string]bool{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "## "):
			if err := finish(); err != nil {
				return nil, err
			}
			name := strings.TrimSpace(line[3:])
			if names[name] {
				return nil, fmt.Errorf("line %d: duplicate mutation %q", n, name)
			}
			names[name] = true
			cur = &Mutation{Name: name, Line: n}
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		case cur == nil:
			return nil, fmt.Errorf("line %d: %q before the first ## entry", n, line)
		case strings.HasPrefix(line, "in:"):
			cur.In = filepath.Clean(strings.TrimSpace(line[3:]))
		case strings.HasPrefix(line, "test:"):
			cur.Tests = strings.Fields(line[5:])
		case strings.HasPrefix(line, "run:"):
			cur.Run = strings.TrimSpace(line[4:])
		case strings.HasPrefix(line, "- ") && cur.From == "":
			cur.From = strings.TrimSpace(line[2:])
		case strings.HasPrefix(line, "+ ") && cur.To == "":
			cur.To = strings.TrimSpace(line[2:])
		default:
			return nil, fmt.Errorf("line %d: unexpected %q (entries have in:, test:, run:, one - line and one + line)", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return out, nil
}

// snippetPattern matches text with any run of spaces standing for any
// other, so alignment changes by gofmt do not make an entry stale.
func snippetPattern(text string) *regexp.Regexp {
	fields := strings.Fields(text)
	for i, f := range fields {
		fields[i] = regexp.QuoteMeta(f)
	}
	return regexp.MustCompile(strings.Join(fields, `\s+`))
}

// errStale says an entry no longer matches the code.
var errStale = errors.New("stale")

// locate finds the one line of m.In that holds m.From and returns the
// file's content with the mutation applied.
func locate(m Mutation) (file string, line int, original, mutated []byte, err error) {
	files := []string{m.In}
	if st, err := os.Stat(m.In); err != nil {
		return "", 0, nil, nil, fmt.Errorf("%w: %v", errStale, err)
	} else if st.IsDir() {
		all, _ := filepath.Glob(filepath.Join(m.In, "*.go"))
		files = files[:0]
		for _, f := range all {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	pat := snippetPattern(m.From)
	var hits []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", 0, nil, nil, err
		}
		lines := strings.SplitAfter(string(b), "\n")
		for i, l := range lines {
			locs := pat.FindAllStringIndex(l, -1)
			for range locs {
				hits = append(hits, fmt.Sprintf("%s:%d", f, i+1))
			}
			if len(locs) == 1 && file == "" {
				lines[i] = l[:locs[0][0]] + m.To + l[locs[0][1]:]
				file, line, original, mutated = f, i+1, b, []byte(strings.Join(lines, ""))
			}
		}
	}
	switch len(hits) {
	case 0:
		return "", 0, nil, nil, fmt.Errorf("%w: %q not found in %s", errStale, m.From, m.In)
	case 1:
		return file, line, original, mutated, nil
	}
	return "", 0, nil, nil, fmt.Errorf("%w: %q found %d times (%s)", errStale, m.From, len(hits), strings.Join(hits, ", "))
}

type runner struct {
	timeout  time.Duration
	log      io.Writer
	baseline map[string]error // by test set
}

// try applies one mutation, runs its tests and restores the file.
func (r *runner) try(ctx context.Context, m Mutation) (res Result) {
	res = Result{Mutation: m}
	start := time.Now()
	defer func() { res.Seconds = time.Since(start).Seconds() }()
	key := strings.Join(m.Tests, " ") + " -run " + m.Run
	base, ok := r.baseline[key]
	if !ok {
		fmt.Fprintf(r.log, "        baseline: go test %s\n", key)
		_, base = r.goTest(ctx, m)
		r.baseline[key] = base
	}
	if base != nil {
		res.Outcome, res.Detail = Baseline, firstLine(base.Error())
		return res
	}
	file, line, original, mutated, err := locate(m)
	if err != nil {
		res.Outcome, res.Detail = Stale, err.Error()
		return res
	}
	res.Where = fmt.Sprintf("%s:%d", file, line)
	st, err := os.Stat(file)
	if err != nil {
		res.Outcome, res.Detail = Stale, err.Error()
		return res
	}
	if err := atomicfile.WriteFile(file, mutated, st.Mode().Perm()); err != nil {
		res.Outcome, res.Detail = Invalid, err.Error()
		return res
	}
	defer func() {
		if err := atomicfile.WriteFile(file, original, st.Mode().Perm()); err != nil {
			fmt.Fprintf(r.log, "mutate: RESTORE %s FAILED: %v (run git checkout -- %s)\n", file, err, file)
		}
	}()
	output, err := r.goTest(ctx, m)
	switch {
	case err == nil:
		res.Outcome = Survived
	case strings.Contains(output, "[build failed]") || strings.Contains(output, "[setup failed]"):
		res.Outcome, res.Detail = Invalid, buildError(output)
	case strings.Contains(output, "panic: test timed out after"):
		res.Outcome = TimedOut
	default:
		res.Outcome, res.Detail = Killed, failedTests(output)
	}
	return res
}

// goTest runs the mutation's tests in their own process group, so that an
// interrupt or a hung test leaves nothing behind.
func (r *runner) goTest(ctx context.Context, m Mutation) (string, error) {
	args := []string{"test", "-count=1", "-timeout", r.timeout.String()}
	if m.Run != "" {
		args = append(args, "-run", m.Run)
	}
	cmd := exec.Command("go", append(args, m.Tests...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := procgroup.Prepare(cmd); err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// go test's own -timeout panics the test binary; this is the backstop
	// for a hung build or a test that ignores it.
	hard := time.NewTimer(r.timeout + time.Minute)
	defer hard.Stop()
	select {
	case err := <-done:
		if err != nil {
			return out.String(), fmt.Errorf("go test %s: %v\n%s", strings.Join(m.Tests, " "), err, out.String())
		}
		return out.String(), nil
	case <-ctx.Done():
	case <-hard.C:
		out.WriteString("\npanic: test timed out after " + (r.timeout + time.Minute).String())
	}
	_ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return out.String(), errors.New("stopped")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// buildError returns the first compiler message of a failed build.
func buildError(output string) string {
	for _, l := range strings.Split(output, "\n") {
		if strings.Contains(l, ".go:") {
			return strings.TrimSpace(l)
		}
	}
	return "build failed"
}

// failedTests lists the top-level tests that failed.
func failedTests(output string) string {
	seen := map[string]bool{}
	var names []string
	for _, l := range strings.Split(output, "\n") {
		if name, ok := strings.CutPrefix(l, "--- FAIL: "); ok {
			name, _, _ = strings.Cut(name, " ")
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		return "tests failed"
	}
	sort.Strings(names)
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
	}
	return strings.Join(names, ", ")
}

// printTable writes the results as a markdown table and a summary line.
func printTable(w io.Writer, results []Result) {
	fmt.Fprintln(w, "| # | result | mutation | where | detail | s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	counts := map[string]int{}
	for i, r := range results {
		counts[r.Outcome]++
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %.0f |\n", i+1, r.Outcome, r.Name, r.Where, strings.ReplaceAll(r.Detail, "|", `\|`), r.Seconds)
	}
	judged := counts[Killed] + counts[TimedOut] + counts[Survived]
	fmt.Fprintf(w, "\nkilled %d of %d (%d by timeout), survived %d; invalid %d, stale %d, baseline failed %d\n",
		counts[Killed]+counts[TimedOut], judged, counts[TimedOut], counts[Survived], counts[Invalid], counts[Stale], counts[Baseline])
}
