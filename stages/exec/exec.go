package exec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mspipe/mspipe/internal/procgroup"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name and Version of the stage.
const (
	Name    = "exec"
	Version = "1.0.0"
)

// Limits of what the stage keeps of the command's output.
const (
	stdoutTail  = 64 << 10 // bytes of stdout returned as the stdout output
	stderrLines = 5        // stderr lines quoted in a failure
	maxLine     = 64 << 10 // longer lines are split across log events
	maxOutput   = 1 << 20  // bytes of the $MSPIPE_OUTPUT file
	// killGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL. It is shorter than the host's grace for the plugin
	// (host.DefaultGrace), so that the command's whole group is gone
	// before the host kills the plugin, which only takes the command itself
	// along (Pdeathsig) when it is killed before it can reap its
	// descendants (plugins/sdk).
	killGrace = 2 * time.Second
)

// Info returns the registry entry of the exec stage.
func Info() plugins.Info {
	// Reusable: Run changes nothing in its process; the command runs in its
	// own process group with the request's environment and directory.
	return plugins.Info{Name: Name, New: New, Reusable: true}
}

// New returns the exec stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     Version,
		Description: "Run a command in the stage's work directory.",
		Outputs: []plugins.OutputSpec{
			{Name: "exit_code", Type: plugins.TypeInt, Description: "the command's exit code (0: failures fail the stage)"},
			{Name: "stdout", Type: plugins.TypeString, Description: "the last 64 KiB of the command's standard output"},
			{Name: plugins.WildcardOutput, Type: plugins.TypeAny, Description: "name=value lines written to $MSPIPE_OUTPUT; values are JSON when they parse, else strings"},
		},
		Check:   check,
		Execute: run,
	}
}

func run(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	req := sc.Request()
	argv := w.argv()
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	dir, err := commandDir(req.WorkDir, w.Dir)
	if err != nil {
		return nil, err
	}
	outFile, err := os.CreateTemp(req.WorkDir, ".mspipe-output-*")
	if err != nil {
		return nil, fmt.Errorf("create output file: %w", err)
	}
	outPath := outFile.Name()
	outFile.Close()
	defer os.Remove(outPath)

	cmdCtx := ctx
	if w.Timeout > 0 {
		var cancel context.CancelFunc
		cmdCtx, cancel = context.WithTimeout(ctx, time.Duration(w.Timeout))
		defer cancel()
	}
	sc.Info("run", "argv", argv, "dir", dir)
	stdout := &tailBuffer{max: stdoutTail}
	stderr := &lineTail{max: stderrLines}
	code, err := runCommand(cmdCtx, argv, dir, commandEnv(os.Environ(), req, w.Env, outPath), killGrace,
		func(chunk string) { stdout.write(chunk); sc.Info(trimEOL(chunk), "stream", "stdout") },
		func(chunk string) { stderr.add(trimEOL(chunk)); sc.Info(trimEOL(chunk), "stream", "stderr") })
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("command %s timed out after %v%s", quoteArgv(argv), w.Timeout, stderr.text())
		}
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("command %s %s%s", quoteArgv(argv), exitText(code), stderr.text())
	}
	outputs, err := readOutputs(outPath)
	if err != nil {
		return nil, err
	}
	outputs["exit_code"] = int64(code)
	outputs["stdout"] = stdout.String()
	return outputs, nil
}

// exitText describes a non-zero code from runCommand: -N is signal N.
func exitText(code int) string {
	if code < 0 {
		return fmt.Sprintf("was killed by signal %d (%v)", -code, syscall.Signal(-code))
	}
	return "exited with code " + strconv.Itoa(code)
}

func commandDir(workDir, dir string) (string, error) {
	switch {
	case dir == "":
		dir = workDir
	case !filepath.IsAbs(dir):
		dir = filepath.Join(workDir, dir)
	}
	if dir == "" {
		return "", nil
	}
	info, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("dir: %w", err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("dir: %s is not a directory", dir)
	}
	return dir, nil
}

// commandEnv builds the command's environment: the plugin's own without the
// plugin handshake variables, then the pipeline's env, the stage's env, and
// the MSPIPE_* variables, later entries winning.
func commandEnv(base []string, req plugins.RunRequest, with map[string]string, outPath string) []string {
	env := make([]string, 0, len(base)+len(req.Env)+len(with)+8)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !pluginVariable(name) {
			env = append(env, kv)
		}
	}
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range with {
		env = append(env, k+"="+v)
	}
	if req.Cluster.RankTable != "" {
		env = append(env, "RANK_TABLE_FILE="+req.Cluster.RankTable)
	}
	if req.Cluster.Devices > 0 {
		env = append(env, "MSPIPE_DEVICES="+strconv.Itoa(req.Cluster.Devices))
	}
	return append(env,
		"MSPIPE_OUTPUT="+outPath,
		"MSPIPE_WORK_DIR="+req.WorkDir,
		"MSPIPE_RUN_ID="+req.RunID,
		"MSPIPE_STAGE_ID="+req.StageID,
		"MSPIPE_ATTEMPT="+strconv.Itoa(req.Attempt),
	)
}

// pluginVariable reports whether an environment variable belongs to the
// plugin handshake (mspipe's cookie, go-plugin's settings and certificate),
// which the command has no business seeing.
func pluginVariable(name string) bool {
	switch name {
	case plugins.MagicCookieKey, "PLUGIN_CLIENT_CERT", "PLUGIN_MIN_PORT", "PLUGIN_MAX_PORT", "PLUGIN_PROTOCOL_VERSIONS",
		"PLUGIN_MULTIPLEX_GRPC", "PLUGIN_UNIX_SOCKET_DIR", "PLUGIN_UNIX_SOCKET_GROUP":
		return true
	}
	return false
}

// runCommand runs argv in its own process group and calls onStdout and
// onStderr for every line, newline included (from two goroutines). It
// returns the exit code, or -N when signal N killed the command. When ctx is
// done the group gets SIGTERM, then SIGKILL unless all of it has exited
// within grace, and the error is ctx.Err(). Whatever is left of the group
// when the command exits is killed.
func runCommand(ctx context.Context, argv []string, dir string, env []string, grace time.Duration,
	onStdout, onStderr func(string)) (int, error) {
	cmd := osexec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	if err := procgroup.Prepare(cmd); err != nil {
		return 0, err
	}
	// Our own pipes, not cmd.StdoutPipe: Wait must return when the command
	// exits even if something it started still holds the write ends.
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return 0, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return 0, fmt.Errorf("start command: %w", err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); readLines(outR, onStdout) }()
	go func() { defer readers.Done(); readLines(errR, onStderr) }()

	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			_ = procgroup.Stop(pgid, exited, grace) // the group is killed below in any case
		case <-exited:
		}
	}()
	waitErr := cmd.Wait()
	close(exited)
	<-stopped
	_ = procgroup.Signal(pgid, syscall.SIGKILL) // leftovers of the group, if any
	readers.Wait()
	outR.Close()
	errR.Close()

	if ctxErr := ctx.Err(); ctxErr != nil {
		return 0, ctxErr
	}
	var exitErr *osexec.ExitError
	if errors.As(waitErr, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal()), nil
		}
		return exitErr.ExitCode(), nil
	}
	if waitErr != nil {
		return 0, fmt.Errorf("wait for command: %w", waitErr)
	}
	return 0, nil
}

// readLines calls fn for every line of r with its newline, splitting lines
// longer than maxLine.
func readLines(r io.Reader, fn func(string)) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			fn(string(line))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	s := strings.Join(q, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return "[" + s + "]"
}
