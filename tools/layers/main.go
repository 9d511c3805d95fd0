package main

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	deps, err := loadDeps(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(2)
	}
	broken := violations(deps, rules)
	for _, v := range broken {
		fmt.Println(v)
	}
	if len(broken) > 0 {
		os.Exit(1)
	}
}

// loadDeps returns, for every package of the module and for the planner,
// the module's packages it depends on (non-test files), relative to the
// module. It runs `go list`, from the current directory, which must be
// inside the module.
func loadDeps(ctx context.Context) (map[string][]string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{join .Deps \" \"}}\t{{with .Error}}{{.Err}}{{end}}", module+"/...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	deps := map[string][]string{}
	dirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("go list: a line of %d fields, want 4: %.200q", len(f), line)
		}
		if f[3] != "" {
			return nil, fmt.Errorf("go list: package %s: %s", f[0], f[3])
		}
		pkg, _ := relative(f[0])
		dirs[pkg] = f[1]
		for _, d := range strings.Fields(f[2]) {
			if rel, ok := relative(d); ok {
				deps[pkg] = append(deps[pkg], rel)
			}
		}
		if _, ok := deps[pkg]; !ok {
			deps[pkg] = nil
		}
	}
	cli := strings.TrimSuffix(planner, "[plan*.go]")
	dir, ok := dirs[cli]
	if !ok {
		return nil, fmt.Errorf("no package %s, whose planner the rules name", cli)
	}
	pd, err := plannerDeps(dir, deps)
	if err != nil {
		return nil, err
	}
	deps[planner] = pd
	return deps, nil
}

// plannerDeps returns what the planner's files (plan*.go in dir, tests
// excepted) import of the module, with all that those packages depend on.
func plannerDeps(dir string, deps map[string][]string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "plan*.go"))
	if err != nil {
		return nil, err
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", fset.Position(imp.Pos()), err)
			}
			if rel, ok := relative(p); ok {
				out = append(out, rel)
				out = append(out, deps[rel]...)
			}
		}
	}
	if len(files) == 0 {
		return nil, errors.New("no plan*.go in " + dir + ": the planner rule names no files")
	}
	return out, nil
}
