package exec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins/sdk/sdktest"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
)

// runExec runs the exec stage in work; the stage logs from two goroutines.
func runExec(t *testing.T, ctx context.Context, work string, with map[string]any) (map[string]any, *sdktest.Result, error) {
	t.Helper()
	r := sdktest.Run(ctx, t, New(), plugins.RunRequest{RunID: "run-7", StageID: "build", WorkDir: work, With: with,
		Env: map[string]string{"FROM_PIPELINE": "p"}, Cluster: plugins.Cluster{Devices: 4, RankTable: "/rt/rank_table_4pcs.json"}})
	return r.Outputs, r, r.Err
}

func TestExecArgv(t *testing.T) {
	work := t.TempDir()
	out, logs, err := runExec(t, context.Background(), work, map[string]any{"command": []any{"echo", "hello", "a b"}})
	if err != nil {
		t.Fatal(err)
	}
	if out["exit_code"] != int64(0) || out["stdout"] != "hello a b\n" || len(out) != 2 {
		t.Errorf("outputs = %#v", out)
	}
	if got := logs.Logs("stream", "stdout"); len(got) != 1 || got[0] != "hello a b" {
		t.Errorf("stdout log lines = %q", got)
	}
}

func TestExecShellOutputsAndEnv(t *testing.T) {
	work := t.TempDir()
	t.Setenv(plugins.MagicCookieKey, plugins.MagicCookieValue)
	t.Setenv("PLUGIN_CLIENT_CERT", "secret")
	script := `
echo "files=3" >> "$MSPIPE_OUTPUT"
echo 'name=abc' >> "$MSPIPE_OUTPUT"
echo 'ratio=2.0' >> "$MSPIPE_OUTPUT"
echo 'list=[1, "x"]' >> "$MSPIPE_OUTPUT"
printf 'notes<<EOF\nline one\nline two\nEOF\n' >> "$MSPIPE_OUTPUT"
echo "env=$STAGE_VAR,$FROM_PIPELINE,$MSPIPE_STAGE_ID,$MSPIPE_RUN_ID,$MSPIPE_ATTEMPT,$MSPIPE_DEVICES,$RANK_TABLE_FILE" >> "$MSPIPE_OUTPUT"
echo "leak=${MSPIPE_PLUGIN:-none},${PLUGIN_CLIENT_CERT:-none}" >> "$MSPIPE_OUTPUT"
echo "pwd=$(pwd)" >> "$MSPIPE_OUTPUT"
echo "to stderr" >&2
`
	out, logs, err := runExec(t, context.Background(), work, map[string]any{"command": script, "env": map[string]any{"STAGE_VAR": "s"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"exit_code": int64(0), "stdout": "",
		"files": int64(3), "name": "abc", "ratio": 2.0, "list": []any{int64(1), "x"}, "notes": "line one\nline two",
		"env":  "s,p,build,run-7,1,4,/rt/rank_table_4pcs.json",
		"leak": "none,none", "pwd": work,
	}
	for k, v := range want {
		if got := out[k]; !equalJSON(got, v) {
			t.Errorf("output %s = %#v, want %#v", k, got, v)
		}
	}
	if len(out) != len(want) {
		t.Errorf("outputs = %#v", out)
	}
	if got := logs.Logs("stream", "stderr"); len(got) != 1 || got[0] != "to stderr" {
		t.Errorf("stderr log lines = %q", got)
	}
	entries, _ := os.ReadDir(work)
	if len(entries) != 0 {
		t.Errorf("the output file was left in the work dir: %v", entries)
	}
}

func equalJSON(a, b any) bool {
	x, err1 := plugins.EncodeJSON(a)
	y, err2 := plugins.EncodeJSON(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func TestExecFailure(t *testing.T) {
	work := t.TempDir()
	_, _, err := runExec(t, context.Background(), work, map[string]any{
		"command": `for i in 1 2 3 4 5 6 7; do echo "err $i" >&2; done; exit 3`})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"exited with code 3", "stderr ends with: err 3 | err 4 | err 5 | err 6 | err 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}
	_, _, err = runExec(t, context.Background(), work, map[string]any{"command": `kill -KILL $$`})
	if err == nil || !strings.Contains(err.Error(), "was killed by signal 9 (killed)") {
		t.Errorf("signal: err = %v", err)
	}
	_, _, err = runExec(t, context.Background(), work, map[string]any{"command": []any{"/no/such/program"}})
	if err == nil || !strings.Contains(err.Error(), "start command") {
		t.Errorf("missing program: err = %v", err)
	}
}

func TestExecTimeout(t *testing.T) {
	start := time.Now()
	_, _, err := runExec(t, context.Background(), t.TempDir(), map[string]any{"command": "echo waiting >&2; sleep 30", "timeout": "200ms"})
	if err == nil || !strings.Contains(err.Error(), "timed out after 200ms") || !strings.Contains(err.Error(), "waiting") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("the timeout did not stop the command (%v)", time.Since(start))
	}
}

// readPid waits for a command to write its background child's pid.
func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(data), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs (absent or a zombie).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d survived the stage", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecCancelKillsGroup(t *testing.T) {
	work := t.TempDir()
	pidFile := filepath.Join(work, "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := runExec(t, ctx, work, map[string]any{"command": `sleep 300 & echo $! > child.pid; wait`})
		errc <- err
	}()
	pid := readPid(t, pidFile)
	if gone(pid) {
		t.Fatal("child not running")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancelled stage did not return")
	}
	waitGone(t, pid)
}

func TestExecKillsLeftovers(t *testing.T) {
	work := t.TempDir()
	start := time.Now()
	// The shell exits at once; its background sleep keeps stdout open.
	out, _, err := runExec(t, context.Background(), work, map[string]any{"command": `sleep 300 & echo $! > child.pid; echo done`})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "done\n" {
		t.Errorf("stdout = %q", out["stdout"])
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("the stage waited for the background process (%v)", time.Since(start))
	}
	waitGone(t, readPid(t, filepath.Join(work, "child.pid")))
}

func TestExecStdoutTail(t *testing.T) {
	// 100000 bytes on one line, then a short line with a 2-byte character.
	out, logs, err := runExec(t, context.Background(), t.TempDir(), map[string]any{
		"command": `head -c 100000 /dev/zero | tr '\0' a; echo; echo "é end"`})
	if err != nil {
		t.Fatal(err)
	}
	s := out["stdout"].(string)
	if len(s) > stdoutTail || len(s) < stdoutTail-3 || !strings.HasSuffix(s, "aaa\né end\n") {
		t.Errorf("stdout: %d bytes, ending %q", len(s), s[max(0, len(s)-12):])
	}
	lines := logs.Logs("stream", "stdout")
	if len(lines) != 3 || len(lines[0]) != maxLine || len(lines[1]) != 100000-maxLine || lines[2] != "é end" {
		t.Errorf("stdout log lines: %d", len(lines))
	}
}

func TestExecDir(t *testing.T) {
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, err := runExec(t, context.Background(), work, map[string]any{"command": "pwd", "dir": "sub"})
	if err != nil || out["stdout"] != filepath.Join(work, "sub")+"\n" {
		t.Errorf("pwd in sub = %v, %v", out["stdout"], err)
	}
	_, _, err = runExec(t, context.Background(), work, map[string]any{"command": "pwd", "dir": "missing"})
	if err == nil || !strings.Contains(err.Error(), "dir:") {
		t.Errorf("missing dir: err = %v", err)
	}
}

func TestExecShellChoice(t *testing.T) {
	work := t.TempDir()
	tests := []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"command": "echo $((1+2))"}, "3\n"},
		{map[string]any{"command": "echo $((1+2))", "shell": false}, "$((1+2))\n"},
		{map[string]any{"command": []any{"echo", "$((1+2))"}}, "$((1+2))\n"},
		{map[string]any{"command": []any{"echo", "$((1+2))"}, "shell": true}, "3\n"},
	}
	for _, tt := range tests {
		out, _, err := runExec(t, context.Background(), work, tt.with)
		if err != nil || out["stdout"] != tt.want {
			t.Errorf("%v: stdout %q, err %v, want %q", tt.with, out["stdout"], err, tt.want)
		}
	}
}

func TestExecValidate(t *testing.T) {
	tests := []struct {
		with map[string]any
		want []string // "path: message" substrings, in order
	}{
		{map[string]any{"command": "make"}, nil},
		{map[string]any{"command": []any{"make", "-j"}, "env": map[string]any{"A": "1"}, "timeout": 30}, nil},
		{map[string]any{}, []string{"/command: empty command"}},
		{map[string]any{"command": ""}, []string{"/command: empty command"}},
		{map[string]any{"command": []any{}}, []string{"/command: empty command"}},
		{map[string]any{"command": "  "}, []string{"/command: empty command"}},
		{map[string]any{"command": []any{" "}}, []string{"/command/0: empty program name"}},
		{map[string]any{"command": "x", "env": map[string]any{"A=B": "1"}}, []string{`/env/A=B: invalid environment variable name "A=B"`}},
		{map[string]any{"command": "x", "env": map[string]any{"N": 1}}, []string{"/env: want string, got number"}},
		{map[string]any{"command": "x", "timeout": "later"}, []string{`duration "later": time: invalid duration`}},
		{map[string]any{"command": "x", "shel": true}, []string{`unknown field "shel"`}},
	}
	for _, tt := range tests {
		problems, err := New().Validate(context.Background(), plugins.ValidateRequest{With: tt.with})
		if err != nil {
			t.Fatal(err)
		}
		if len(tt.want) == 0 && len(problems) > 0 {
			t.Errorf("%v: unexpected problems %v", tt.with, problems)
			continue
		}
		if len(tt.want) > 0 && (len(problems) == 0 || !strings.Contains(problems[0].String(), tt.want[0])) {
			t.Errorf("%v: problems %v, want %q", tt.with, problems, tt.want)
		}
	}
}

func TestDescriptorIsUsable(t *testing.T) {
	d, err := New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != Name || d.Version != Version || len(d.Outputs) != 3 || !strings.Contains(string(d.WithSchema), `"oneOf"`) {
		t.Errorf("descriptor = %+v", d)
	}
	if info := Info(); info.Name != Name || info.New == nil {
		t.Errorf("Info = %+v", info)
	}
}

func TestRunCommandKillsAfterGrace(t *testing.T) {
	work := t.TempDir()
	pidFile := filepath.Join(work, "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Both the shell and its child ignore SIGTERM: only SIGKILL stops them.
		code, err := runCommand(ctx, []string{"/bin/sh", "-c", `trap "" TERM; sleep 300 & echo $! > child.pid; wait`},
			work, os.Environ(), 100*time.Millisecond, func(string) {}, func(string) {})
		done <- result{code, err}
	}()
	pid := readPid(t, pidFile)
	cancel()
	select {
	case r := <-done:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("runCommand = %d, %v, want context.Canceled", r.code, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("runCommand did not return after SIGKILL")
	}
	waitGone(t, pid)
}

func TestKillGraceFitsHostGrace(t *testing.T) {
	if killGrace >= host.DefaultGrace {
		t.Errorf("killGrace %v must be shorter than the host's grace %v", killGrace, host.DefaultGrace)
	}
}
