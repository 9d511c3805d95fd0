package tests

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// badCase is one directory of testdata/bad/<kind>/<name>/: its files are the
// inputs, copied into a fresh workspace, and its case.txt says what to
// prepare, what to run and what mspipe must answer. Lines of case.txt:
//
//	# a comment saying what the case is about
//	make fifo PATH        a named pipe (a reader that opens it blocks)
//	make dir PATH         an empty directory where a file is expected
//	make sparse PATH N    a file of N bytes (suffix K, M or G) that takes no disk
//	make symlink PATH TO  a symbolic link, e.g. to /dev/zero
//	run ARGS...           the mspipe arguments, split at spaces
//	exit N                the exit code
//	stderr TEXT           stderr contains TEXT (any number of these)
//	stdout TEXT           stdout contains TEXT (any number of these)
//
// Adding a case is adding a directory.
type badCase struct {
	makes          [][]string
	args           []string
	exit           int
	stderr, stdout []string
}

func readBadCase(t *testing.T, path string) badCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := badCase{exit: -1}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, rest, _ := strings.Cut(line, " ")
		switch key {
		case "make":
			c.makes = append(c.makes, strings.Fields(rest))
		case "run":
			c.args = strings.Fields(rest)
		case "exit":
			c.exit, err = strconv.Atoi(rest)
			if err != nil {
				t.Fatalf("%s:%d: exit: %v", path, n, err)
			}
		case "stderr":
			c.stderr = append(c.stderr, rest)
		case "stdout":
			c.stdout = append(c.stdout, rest)
		default:
			t.Fatalf("%s:%d: unknown keyword %q", path, n, key)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(c.args) == 0 || c.exit < 0 || len(c.stderr)+len(c.stdout) == 0 {
		t.Fatalf("%s: a case needs run, exit and at least one stderr or stdout line", path)
	}
	return c
}

// prepare makes the special files a case asks for inside dir.
func (c badCase) prepare(t *testing.T, dir string) {
	t.Helper()
	for _, m := range c.makes {
		if len(m) < 2 {
			t.Fatalf("make %v: missing path", m)
		}
		path := filepath.Join(dir, m[1])
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case m[0] == "fifo" && len(m) == 2:
			err = syscall.Mkfifo(path, 0o644)
		case m[0] == "dir" && len(m) == 2:
			err = os.Mkdir(path, 0o755)
		case m[0] == "symlink" && len(m) == 3:
			err = os.Symlink(m[2], path)
		case m[0] == "sparse" && len(m) == 3:
			var size int64
			if size, err = parseSize(m[2]); err == nil {
				err = makeSparse(path, size)
			}
		default:
			t.Fatalf("make %v: unknown kind or wrong arguments", m)
		}
		if err != nil {
			t.Fatalf("make %v: %v", m, err)
		}
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

func makeSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyTree copies the regular files and directories under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if rel == "case.txt" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBadInputCorpus runs every case of testdata/bad through the mspipe
// binary, as a user would, and checks the exit code and the messages: bad
// input is refused with a clear error naming the file (and, for specs and
// rank tables, the line and column), never with a panic or a hang.
func TestBadInputCorpus(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("testdata", "bad", "*", "*", "case.txt"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, file := range cases {
		dir := filepath.Dir(file)
		kind := filepath.Base(filepath.Dir(dir))
		kinds[kind]++
		t.Run(kind+"/"+filepath.Base(dir), func(t *testing.T) {
			c := readBadCase(t, file)
			w := newWorkspace(t)
			copyTree(t, dir, w.dir)
			c.prepare(t, w.dir)
			r := w.runFor(60, c.args...)
			for _, out := range []string{r.stdout, r.stderr} {
				if strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
					t.Fatalf("mspipe %s panicked:\n%s", strings.Join(c.args, " "), out)
				}
			}
			if r.code != c.exit {
				t.Errorf("mspipe %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), r.code, c.exit, r.stdout, r.stderr)
			}
			for _, want := range c.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("mspipe %s: stderr lacks %q:\n%s", strings.Join(c.args, " "), want, r.stderr)
				}
			}
			for _, want := range c.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("mspipe %s: stdout lacks %q:\n%s", strings.Join(c.args, " "), want, r.stdout)
				}
			}
		})
	}
	// The corpus covers the four kinds of input mspipe reads from users.
	total := 0
	for _, kind := range []string{"spec", "ranktable", "runstate", "ckpt"} {
		if kinds[kind] < 8 {
			t.Errorf("only %d %s cases in testdata/bad/%s", kinds[kind], kind, kind)
		}
		total += kinds[kind]
	}
	if total < 100 {
		t.Errorf("the corpus has %d cases, want at least 100", total)
	}
}
