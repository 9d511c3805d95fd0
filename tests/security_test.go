package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ranktable"
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
		{"checkpoint outputs linked", "version: 1\nname: escape\nstages:\n" +
			"  prepare: {uses: cifar/prepare, with: {train_images: 40, test_images: 20}}\n" +
			"  train: {uses: npu/train, needs: prepare, with: {data: \"${{ stages.prepare.outputs.dir }}\", model: cnn, mode: stand_alone, epochs: 1, batch_size: 8, eval: false}}\n" +
			plant("mkdir -p ../integrate ../reshard && ln -s "+sentinel+" ../integrate/checkpoint && ln -s "+filepath.Join(sentinel, "sub")+" ../reshard/checkpoints") +
			"  integrate: {uses: ckpt/integrate, needs: [train, plant], with: {from: \"${{ stages.train.outputs.checkpoints }}\"}}\n" +
			"  reshard: {uses: ckpt/reshard, needs: [train, plant], with: {from: \"${{ stages.train.outputs.checkpoints }}\", devices: 2}}\n",
			[]string{"work dir: checkpoint resolves to " + sentinel + ", outside the directory", "work dir: checkpoints resolves to " + filepath.Join(sentinel, "sub") + ", outside the directory"}},
		{"checkpoint prefix with a slash", head + train("prepare", ", prefix: ../../x"),
			[]string{"stages.train.with.prefix", "pattern"}},
		{"stage id climbs", "version: 1\nname: escape\nstages:\n  \"../../x\": {uses: exec, with: {command: 'echo hi > f'}}\n",
			[]string{"stages.../../x: a stage id must be letters, digits and _"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, sentinel)
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

// listener is a listening TCP socket seen in a process of the run.
type listener struct {
	pid  int
	role string // rank, plugin or mspipe
	addr netip.AddrPort
}

// listeners returns the listening TCP sockets (IPv4 and IPv6) of the
// workspace's processes, read from /proc.
func (w *workspace) listeners() []listener {
	inodes := map[string]netip.AddrPort{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			if ap, ok := parseProcAddr(f[1]); ok {
				inodes[f[9]] = ap
			}
		}
	}
	var out []listener
	for _, pid := range w.taggedProcesses() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		role := "mspipe"
		switch {
		case bytes.Contains(cmdline, []byte("__npu-worker")):
			role = "rank"
		case bytes.Contains(cmdline, []byte("__stage")):
			role = "plugin"
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil || !strings.HasPrefix(target, "socket:[") {
				continue
			}
			if ap, ok := inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")]; ok {
				out = append(out, listener{pid: pid, role: role, addr: ap})
			}
		}
	}
	return out
}

// parseProcAddr reads /proc/net/tcp's "0100007F:1F90": the address as
// 32-bit words in host (little-endian) order, then the port in hex.
func parseProcAddr(s string) (netip.AddrPort, bool) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(hexAddr)
	port, perr := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || perr != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), true
}

// secretForms are the ways a secret could be written to a log.
func secretForms(secret []byte) map[string][]byte {
	return map[string][]byte{
		"raw":              secret,
		"hex":              []byte(hex.EncodeToString(secret)),
		"HEX":              []byte(strings.ToUpper(hex.EncodeToString(secret))),
		"base64":           []byte(base64.RawStdEncoding.EncodeToString(secret)), // a prefix of the padded form too
		"base64url":        []byte(base64.RawURLEncoding.EncodeToString(secret)),
		"hex of 8 bytes":   []byte(hex.EncodeToString(secret[:8])),
		"Go byte slice":    []byte(strings.Trim(fmt.Sprint(secret), "[]")),
		"quoted (%q form)": []byte(strings.Trim(fmt.Sprintf("%q", secret), `"`)),
	}
}

// TestCollectiveJobSecurity runs a data-parallel job over TCP and a
// semi_auto_parallel job, 2 ranks each. While they run, every listening
// socket of the run's processes is on a device_ip of the stage's rank
// table (ranks) or on loopback (anything else), never on a wildcard
// address. Afterwards, no file of the run (but job.secret itself), no
// event and nothing mspipe printed holds either job's secret in any
// common encoding.
func TestCollectiveJobSecurity(t *testing.T) {
	w := newWorkspace(t)
	w.write("jobs.yaml", `version: 1
name: jobs
cluster: {devices: 2}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 640, test_images: 40, shards: 2}}
  dp:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 2, batch_size: 8, log_steps: 1, collective_timeout: 5s, collective_transport: tcp}
  semi:
    uses: npu/train
    needs: dp
    with: {data: "${{ stages.prepare.outputs.dir }}", model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 2]]}, epochs: 1, batch_size: 8, collective_timeout: 5s}
`)
	// Catching a rank while it listens is a race the machine's load can
	// lose (the ranks connect before the poll sees them). A run in which
	// no rank listener was seen checks nothing, so it is run again, up to
	// three times in all, rather than passed or failed on luck.
	var seen map[listener]bool
	var stdout, stderr bytes.Buffer
	for attempt := 1; ; attempt++ {
		args := []string{"run", "jobs.yaml"}
		if attempt > 1 {
			args = append(args, "--no-cache")
		}
		stdout.Reset()
		stderr.Reset()
		seen = runWatchingListeners(t, w, args, &stdout, &stderr)
		if rankListening(seen) || attempt == 3 {
			break
		}
		t.Logf("attempt %d: no rank was caught listening; running the stages again", attempt)
	}
	id := strings.TrimSpace(stdout.String())
	runDir := filepath.Join(w.dir, "runs", id)

	deviceIPs := map[netip.Addr]bool{}
	for _, stage := range []string{"dp", "semi"} {
		tables, _ := filepath.Glob(filepath.Join(runDir, "stages", stage, "rank_table_*pcs.json"))
		if len(tables) != 1 {
			t.Fatalf("stage %s: rank tables %v", stage, tables)
		}
		table, _, err := ranktable.Load(tables[0])
		if err != nil {
			t.Fatal(err)
		}
		ranks, err := table.Ranks()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ranks {
			deviceIPs[netip.MustParseAddr(r.DeviceIP)] = true
		}
	}
	rankListeners := 0
	for l := range seen {
		t.Logf("%s pid %d listens on %s", l.role, l.pid, l.addr)
		switch {
		case l.addr.Addr().IsUnspecified():
			t.Errorf("%s pid %d listens on the wildcard address %s", l.role, l.pid, l.addr)
		case l.role == "rank":
			rankListeners++
			if !deviceIPs[l.addr.Addr()] {
				t.Errorf("rank pid %d listens on %s, not a device_ip of the rank table %v", l.pid, l.addr, deviceIPs)
			}
		case l.addr.Addr() != netip.MustParseAddr("127.0.0.1"):
			t.Errorf("%s pid %d listens on %s, not 127.0.0.1", l.role, l.pid, l.addr)
		}
	}
	if rankListeners == 0 {
		t.Error("no rank was seen listening: the listener check saw nothing to check")
	}

	secrets := map[string][]byte{}
	for _, stage := range []string{"dp", "semi"} {
		path := filepath.Join(runDir, "stages", stage, "job.secret")
		s, err := os.ReadFile(path)
		if err != nil || len(s) < 16 {
			t.Fatalf("stage %s: job secret: %v (%d bytes)", stage, err, len(s))
		}
		if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
			t.Errorf("%s is mode %v, want 0600", path, info.Mode().Perm())
		}
		secrets[stage] = s
	}
	search := map[string][]byte{"mspipe stdout": stdout.Bytes(), "mspipe stderr": stderr.Bytes()}
	files := 0
	err := filepath.WalkDir(runDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || d.Name() == "job.secret" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(runDir, p)
		search[rel] = data
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"events.jsonl", "stages/dp/device0/env0.log", "stages/dp/device1/train.log1", "stages/semi/worker.json"} {
		if _, ok := search[must]; !ok {
			t.Errorf("%s is missing from the run: the search would not cover it", must)
		}
	}
	for stage, secret := range secrets {
		for form, needle := range secretForms(secret) {
			for name, data := range search {
				if bytes.Contains(data, needle) {
					t.Errorf("%s holds stage %s's job secret (%s)", name, stage, form)
				}
			}
		}
	}
	t.Logf("searched %d files of the run and mspipe's output for %d secrets in %d forms", files, len(secrets), len(secretForms(secrets["dp"])))
	if pids := w.waitNoProcesses(5 * time.Second); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}

// runWatchingListeners runs mspipe with args in w and returns the
// listening sockets seen in the run's processes while it ran; the run
// must succeed.
func runWatchingListeners(t *testing.T, w *workspace, args []string, stdout, stderr *bytes.Buffer) map[listener]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := w.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Ranks listen only while they connect, a few milliseconds. To see
	// it, rank 1 is stopped (SIGSTOP) until a listener of another rank,
	// which waits for it, has been seen, or for at most 3s (well inside
	// the collective timeout); then it goes on.
	seen := map[listener]bool{}
	stopped, stoppedAt := 0, time.Time{}
	resume := func() {
		if stopped > 0 {
			_ = syscall.Kill(stopped, syscall.SIGCONT)
			stopped = -1
		}
	}
	defer resume()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(5 * time.Millisecond):
			// Rank 1 dials rank 0: stopped before it has, it keeps
			// rank 0 listening. It is stopped as soon as it is seen,
			// whether or not rank 0 has been.
			if stopped == 0 {
				if pid := w.rankPid(1); pid != 0 && syscall.Kill(pid, syscall.SIGSTOP) == nil {
					stopped, stoppedAt = pid, time.Now()
				}
			}
			for _, l := range w.listeners() {
				seen[l] = true
				if l.role == "rank" && l.pid != stopped && stopped > 0 {
					resume()
				}
			}
			if stopped > 0 && time.Since(stoppedAt) > 3*time.Second {
				resume()
			}
		}
	}
	if cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("run: exit %d\n%s", cmd.ProcessState.ExitCode(), stderr.String())
	}
	return seen
}

// rankListening says whether a rank process was seen listening.
func rankListening(seen map[listener]bool) bool {
	for l := range seen {
		if l.role == "rank" {
			return true
		}
	}
	return false
}
