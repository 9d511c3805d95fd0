package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// snapshot lists every entry under dir with its kind and, for files and
// links, a hash of the content or target: any write under dir changes it.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := rel + " " + info.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			line += " " + hex.EncodeToString(sum[:])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestWritesStayInTheRunDirectory tries, for every option and place a spec
// can make a built-in stage write to, to escape the run directory: a ".."
// path, an absolute one, a symbolic link planted in the stage's work dir
// (dangling or not) or as a parent. Each run fails before writing, with a
// message naming the spec key or the planted link, and a sentinel
// directory outside stays exactly as it was.
func TestWritesStayInTheRunDirectory(t *testing.T) {
	sentinel := t.TempDir()
	if err := os.WriteFile(filepath.Join(sentinel, "keep.txt"), []byte("untouched\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(sentinel, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, sentinel)

	const head = "version: 1\nname: escape\ncluster: {devices: 2}\nstages:\n" +
		"  prepare: {uses: cifar/prepare, with: {train_images: 40, test_images: 20, shards: 2}}\n"
	// plant runs a command in an exec stage's work dir (stages/plant/)
	// before the stage under test, which needs it.
	plant := func(cmd string) string {
		return "  plant: {uses: exec, with: {command: '" + cmd + "'}}\n"
	}
	semiAuto := `{data: "${{ stages.prepare.outputs.dir }}", model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 2]]}, epochs: 1, batch_size: 4`
	train := func(needs, extra string) string {
		return "  train:\n    uses: npu/train\n    needs: [" + needs + "]\n    with: " + semiAuto + extra + "}\n"
	}
	cases := []struct {
		name, spec string
		want       []string // all in mspipe's output (stderr and stdout)
	}{
		{"strategy file climbs", head + train("prepare", ", strategy_ckpt_save_file: ../../../../escape.ckpt"),
			[]string{"strategy_ckpt_save_file", "../../../../escape.ckpt climbs outside the directory"}},
		{"strategy file absolute", head + train("prepare", ", strategy_ckpt_save_file: "+filepath.Join(sentinel, "abs.ckpt")),
			[]string{"strategy_ckpt_save_file", filepath.Join(sentinel, "abs.ckpt") + " is absolute"}},
		{"strategy file dangling link", head + plant("mkdir -p ../train && ln -s "+filepath.Join(sentinel, "s.ckpt")+" ../train/strategy.ckpt") +
			train("prepare, plant", ""),
			[]string{"with.strategy_ckpt_save_file: strategy.ckpt resolves to " + filepath.Join(sentinel, "s.ckpt") + ", outside the directory"}},
		{"strategy file linked parent", head + plant("mkdir -p ../train && ln -s "+filepath.Join(sentinel, "sub")+" ../train/out") +
			train("prepare, plant", ", strategy_ckpt_save_file: out/s.ckpt"),
			[]string{"with.strategy_ckpt_save_file: out/s.ckpt resolves to " + filepath.Join(sentinel, "sub", "s.ckpt")}},
		{"rank dir linked", head + plant("mkdir -p ../train && ln -s "+sentinel+" ../train/device1") + train("prepare, plant", ""),
			[]string{"work dir: device1 is a symbolic link to " + sentinel + ", outside the directory"}},
		{"stage work dir linked", head + plant("ln -s "+sentinel+" ../train") + train("prepare, plant", ""),
			[]string{"stages.train: work dir: stages/train resolves to " + sentinel + ", outside the directory"}},
		{"prepare output linked", "version: 1\nname: escape\nstages:\n" + plant("mkdir -p ../prepare && ln -s "+sentinel+" ../prepare/data") +
			"  prepare: {uses: cifar/prepare, needs: plant, with: {train_images: 40, test_images: 20}}\n",
			[]string{"work dir: data resolves to " + sentinel + ", outside the directory"}},
		{"launch rank dir linked", "version: 1\nname: escape\ncluster: {devices: 2}\nstages:\n" + plant("mkdir -p ../launch && ln -s "+sentinel+" ../launch/device0") +
			"  launch: {uses: npu/launch, needs: plant, with: {command: 'echo hi > out.txt'}}\n",
			[]string{"work dir: device0 is a symbolic link to " + sentinel}},
		{"checkpoint prefix with a slash", head + train("prepare", ", prefix: ../../x"),
			[]string{"stages.train.with.prefix", "pattern"}},
		{"stage id climbs", "version: 1\nname: escape\nstages:\n  \"../../x\": {uses: exec, with: {command: 'echo hi > f'}}\n",
			[]string{"stages.../../x: a stage id must be letters, digits and _"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkspace(t)
			w.write("escape.yaml", c.spec)
			r := w.run("run", "escape.yaml")
			out := r.stdout + r.stderr
			if r.code == 0 {
				t.Fatalf("run succeeded; want a refusal\n%s", out)
			}
			if id := strings.TrimSpace(r.stdout); id != "" && !strings.Contains(id, "\n") {
				if data, err := os.ReadFile(filepath.Join(w.dir, "runs", id, "run.json")); err == nil {
					out += string(data)
				}
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, c.want[0]) {
					t.Logf("refused: %s", strings.TrimSpace(line))
					break
				}
			}
			for _, want := range c.want {
				if !strings.Contains(out, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, out)
				}
			}
			if after := snapshot(t, sentinel); after != before {
				t.Fatalf("the directory outside changed:\nbefore\n%s\nafter\n%s", before, after)
			}
			if pids := w.waitNoProcesses(5e9); len(pids) > 0 {
				t.Errorf("processes left: %v", pids)
			}
		})
	}
}
