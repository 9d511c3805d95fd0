package host

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mspipe/mspipe/internal/procgroup"
	"github.com/mspipe/mspipe/plugins"
)

// Defaults of [LaunchConfig].
const (
	DefaultStartTimeout = 10 * time.Second
	DefaultGrace        = 5 * time.Second
)

// exitWait bounds how long a failed call waits for the exit status of a
// process whose connection broke.
const exitWait = 2 * time.Second

// LaunchConfig says how to start a plugin process.
type LaunchConfig struct {
	// Name is the stage name the plugin was resolved from. When set, the
	// plugin must describe itself with this name. Messages use it, or the
	// executable's base name.
	Name string
	// Path and Args are the executable and its arguments. Built-in stages
	// are the mspipe binary itself with args "__stage <name>".
	Path string
	Args []string
	// Env is added to the host's environment for the plugin process.
	Env []string
	// Dir is the plugin process's working directory; empty means the host's.
	Dir string
	// SHA256 pins the executable's digest ("sha256:<hex>" or "<hex>"). A
	// mismatch refuses to start it. Empty means no pin.
	SHA256 string
	// Log receives the plugin's stdout and stderr and the host's messages
	// about the plugin (the stage log). Nil discards them; they never go to
	// the terminal.
	Log io.Writer
	// StartTimeout bounds the handshake and the first Describe call;
	// 0 means DefaultStartTimeout.
	StartTimeout time.Duration
	// Grace is how long Close waits after SIGTERM before SIGKILL;
	// 0 means DefaultGrace.
	Grace time.Duration
	// MemoryLimit, when positive, is the most memory in bytes the plugin
	// process may allocate (RLIMIT_DATA, set right after the handshake,
	// before any Run); processes it starts inherit the same limit, each on
	// its own. Go plugins also get a GOMEMLIMIT a little below it.
	MemoryLimit int64
	// SocketDir is where the plugin's gRPC socket is made: a fresh private
	// directory is created inside it for each launch and removed when the
	// plugin has ended, however it ended. Empty means os.TempDir().
	SocketDir string
}

// Client is a running plugin process. It is a [plugins.Stage]: Describe returns the
// descriptor read at launch, Run checks outputs against it. Close (or the
// end of the context given to Launch) stops the process group.
type Client struct {
	label  string
	cfg    LaunchConfig
	pc     *plugin.Client
	cmd    *exec.Cmd
	stage  *plugins.RemoteStage
	desc   plugins.Descriptor
	pid    int
	exited <-chan struct{}
	tail   *stderrTail
	tls    *tls.Config // the host's side of this plugin's connection
	// sockets is this launch's private directory for the plugin's socket
	// (PLUGIN_UNIX_SOCKET_DIR), removed once the process has ended.
	sockets string

	closing   chan struct{} // closed when Close starts; ends the context watcher
	closeOnce sync.Once
	closeErr  error
}

var _ plugins.Stage = (*Client)(nil)

// pluginLogger is go-plugin's logger for one plugin, writing to its stage
// log: go-plugin's own notices and the plugin's hclog lines, from Info up,
// without the line go-plugin logs when a plugin process ends without error
// ("plugin process exited: plugin=/tmp/go-build.../exe/mspipe"): every stage
// ends so, and in `mspipe logs` it said nothing but a build path. An exit
// with an error is still logged.
func pluginLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   "mspipe",
		Output: w,
		Level:  hclog.Info,
		Exclude: func(level hclog.Level, msg string, _ ...any) bool {
			return level == hclog.Info && msg == "plugin process exited"
		},
	})
}

// Launch starts the plugin process in its own process group (see
// internal/procgroup), completes the handshake (gRPC only, mutual TLS with
// the host's certificates, see [plugins.EnvTLS]), reads the plugin's
// descriptor and checks that the host can use it. The process lives until Close is called or ctx is done,
// whichever comes first; either stops its whole process group. The
// handshake itself is bounded by StartTimeout rather than by ctx: go-plugin
// offers no way to interrupt it.
func Launch(ctx context.Context, cfg LaunchConfig) (*Client, error) {
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	label := launchLabel(cfg)
	if cfg.Path == "" {
		return nil, fmt.Errorf("%s: no executable path", label)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var secure *plugin.SecureConfig
	if cfg.SHA256 != "" {
		sum, err := parsePin(cfg.SHA256)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		secure = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}

	creds, err := hostCredentials()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	launch, err := creds.forLaunch()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}

	sockets, err := socketDir(cfg.SocketDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	started := false
	defer func() {
		if !started {
			_ = os.RemoveAll(sockets)
		}
	}()

	logw := &lockedWriter{w: cfg.Log}
	if cfg.Log == nil {
		logw.w = io.Discard
	}
	tail := &stderrTail{}
	cmd := exec.Command(cfg.Path, cfg.Args...)
	// Last, so that they win over inherited values. PLUGIN_CLIENT_CERT lets
	// a plugin built with an SDK that relied on AutoMTLS answer with its own
	// server certificate, which go-plugin then trusts for that connection.
	// go-plugin's server makes its Unix socket in PLUGIN_UNIX_SOCKET_DIR
	// (else in the system's temporary directory, where a plugin that is
	// killed leaves it behind).
	cmd.Env = append(append(os.Environ(), cfg.Env...), launch.env, "PLUGIN_CLIENT_CERT="+string(creds.clientCertPEM),
		plugin.EnvUnixSocketDir+"="+sockets)
	if cfg.MemoryLimit > 0 {
		cmd.Env = append(cmd.Env, goMemoryLimit(cfg.MemoryLimit))
	}
	cmd.Dir = cfg.Dir
	if err := procgroup.PrepareSupervisor(cmd, plugins.ParentDeathSignal); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake(),
		Plugins:          plugins.PluginSet(nil),
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		TLSConfig:        launch.client.Clone(), // go-plugin may modify it
		SkipHostEnv:      true,                  // cmd.Env already has it, under cfg.Env
		StartTimeout:     cfg.StartTimeout,
		Logger:           pluginLogger(logw),
		Stderr:           tail,
		SyncStdout:       logw,
		SyncStderr:       logw,
		// After go-plugin's own options, which allow 2 GiB messages.
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugins.MaxMessageBytes))},
	})

	rpc, err := pc.Client() // starts the process and does the handshake
	if err != nil {
		if cmd.Process != nil {
			_ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL)
		}
		pc.Kill()
		return nil, startError(label, cfg, cmd, tail, err)
	}
	c := &Client{label: label, cfg: cfg, pc: pc, cmd: cmd, pid: cmd.Process.Pid, tail: tail, tls: launch.client,
		sockets: sockets, closing: make(chan struct{})}
	started = true // from here on, Close removes the socket directory
	if cfg.MemoryLimit > 0 {
		if err := limitMemory(c.pid, cfg.MemoryLimit); err != nil {
			_ = procgroup.Signal(c.pid, syscall.SIGKILL)
			pc.Kill()
			_ = os.RemoveAll(sockets)
			return nil, fmt.Errorf("%s: set its memory limit (limits.memory): %w", label, err)
		}
	}
	raw, err := rpc.Dispense(plugins.PluginName)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%s: %w: %v", label, plugins.ErrIncompatible, err)
	}
	stage, ok := raw.(*plugins.RemoteStage)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("%s: %w: dispensed %T", label, plugins.ErrIncompatible, raw)
	}
	c.stage, c.exited = stage, stage.Exited()
	go func() {
		select {
		case <-ctx.Done():
			_ = c.Close()
		case <-c.closing:
		}
	}()

	desc, err := c.describe(ctx)
	if err != nil {
		_ = c.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, c.memoryError(err)
	}
	c.desc = desc
	return c, nil
}

// describe asks for the descriptor, within the start timeout, and checks it.
func (c *Client) describe(ctx context.Context) (plugins.Descriptor, error) {
	describeCtx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	desc, err := c.stage.Describe(describeCtx)
	if err != nil {
		if ctx.Err() == nil && describeCtx.Err() != nil {
			return desc, fmt.Errorf("%s: %w: no answer to Describe within %v", c.label, ErrStartTimeout, c.cfg.StartTimeout)
		}
		return desc, c.explain(ctx, err)
	}
	if err := plugins.CheckDescriptor(desc); err != nil {
		return desc, fmt.Errorf("%s: %w", c.label, err)
	}
	if c.cfg.Name != "" && desc.Name != c.cfg.Name {
		return desc, fmt.Errorf("%s: %w: it describes itself as %q", c.label, plugins.ErrIncompatible, desc.Name)
	}
	return desc, nil
}

// Describe returns the descriptor the plugin gave at launch.
func (c *Client) Describe(context.Context) (plugins.Descriptor, error) {
	return c.desc, nil
}

// Validate asks the plugin to check a `with` block.
func (c *Client) Validate(ctx context.Context, req plugins.ValidateRequest) ([]plugins.Problem, error) {
	problems, err := c.stage.Validate(ctx, req)
	if err != nil {
		return nil, c.explain(ctx, err)
	}
	return problems, nil
}

// Run runs the stage in the plugin and returns its outputs, checked against
// the declared outputs: floats come back as float64, relative paths joined
// to req.WorkDir. When ctx is done the call returns ctx.Err() and the plugin
// sees its own context cancelled; the process keeps running until Close.
func (c *Client) Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error) {
	outputs, err := c.stage.Run(ctx, req, emit)
	if err != nil {
		if ctx.Err() != nil {
			return nil, c.explain(ctx, err)
		}
		return nil, c.memoryError(c.explain(ctx, err))
	}
	return plugins.CheckOutputs(c.desc, req.WorkDir, outputs)
}

// Exited is closed once the plugin process has ended.
func (c *Client) Exited() <-chan struct{} { return c.exited }

// Pid returns the plugin's process id, which is also its process group id.
func (c *Client) Pid() int { return c.pid }

// Close stops the plugin: SIGTERM to its process group, then, if anything
// of the group is still running after the grace period, SIGKILL. It returns
// once the plugin process has exited. Close may be called more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.terminate() })
	return c.closeErr
}

func (c *Client) terminate() error {
	close(c.closing)
	exited := c.exited
	if exited == nil { // failed before the gRPC client existed
		done := make(chan struct{})
		close(done)
		exited = done
		defer c.pc.Kill()
	}
	if err := procgroup.Stop(c.pid, exited, c.cfg.Grace); err != nil {
		return fmt.Errorf("%s: %w", c.label, err)
	}
	if c.exited != nil {
		c.pc.Kill() // the process is gone: this only releases the connection and goroutines
	}
	if err := os.RemoveAll(c.sockets); err != nil {
		return fmt.Errorf("%s: remove its socket directory: %w", c.label, err)
	}
	return nil
}

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path
// holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// socketDirPrefix starts the name of every socket directory; the pid of
// the mspipe process that made it follows.
const socketDirPrefix = "mspipe-plugin-"

// socketDir creates a private directory (mode 0700) for one plugin's
// socket inside base (os.TempDir() when empty), named after this process,
// and, the first time this process uses base, removes those of mspipe
// processes that are gone (killed before they could remove their own):
// listing a busy temporary directory at every launch cost a few ms a stage,
// and a process that dies later is cleaned up by the next mspipe that
// starts. go-plugin names the socket "plugin" and up
// to ten digits; a base too long for that is refused here rather than as
// bind's "invalid argument".
func socketDir(base string) (string, error) {
	if base == "" {
		base = os.TempDir()
	}
	if _, seen := staleSwept.LoadOrStore(base, true); !seen {
		removeStaleSocketDirs(base)
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", socketDirPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("socket directory: %w", err)
	}
	if n := len(dir) + len("/plugin") + 10; n > maxSocketPath {
		_ = os.Remove(dir)
		return "", fmt.Errorf("socket directory %s: a socket path there would be %d bytes, Unix sockets take at most %d: set TMPDIR to a shorter directory", dir, n, maxSocketPath)
	}
	return dir, nil
}

// staleSwept holds the socket bases this process has already swept of
// stale directories.
var staleSwept sync.Map

// removeStaleSocketDirs removes the socket directories in base whose
// mspipe process no longer runs. Failures are left for a later launch.
func removeStaleSocketDirs(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), socketDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(base, e.Name()))
	}
}

// processAlive reports whether a process with this pid exists (signal 0
// reaches it, or it belongs to another user).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// explain turns an error of a call into what the caller needs: its own
// ctx.Err() when it cancelled, the exit status and crash message when the
// plugin died, the plugin's name on a protocol problem.
func (c *Client) explain(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	if errors.Is(err, plugins.ErrPluginExited) {
		select {
		case <-c.exited:
			return c.exitError(c.cmd.ProcessState)
		case <-time.After(exitWait):
			return c.exitError(nil)
		}
	}
	if errors.Is(err, plugins.ErrBadReply) || errors.Is(err, plugins.ErrIncompatible) {
		return fmt.Errorf("%s: %w", c.label, err)
	}
	return err
}

func (c *Client) exitError(state *os.ProcessState) error {
	status := "connection lost"
	if state != nil {
		status = state.String()
	}
	err := fmt.Errorf("%s (pid %d): %w (%s)", c.label, c.pid, plugins.ErrPluginExited, status)
	if s := c.tail.summary(); s != "" {
		err = fmt.Errorf("%w: %s", err, s)
	}
	return err
}

func launchLabel(cfg LaunchConfig) string {
	if cfg.Name != "" {
		return fmt.Sprintf("plugin %q", cfg.Name)
	}
	return fmt.Sprintf("plugin %s", filepath.Base(cfg.Path))
}

func parsePin(pin string) ([]byte, error) {
	s := strings.TrimPrefix(strings.TrimSpace(pin), "sha256:")
	sum, err := hex.DecodeString(s)
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("sha256 pin %q: want 64 hex digits", truncate(pin, 80))
	}
	return sum, nil
}

// startError explains why the handshake failed. go-plugin reports most
// causes only as text, hence the matching on its messages.
func startError(label string, cfg LaunchConfig, cmd *exec.Cmd, tail *stderrTail, err error) error {
	msg := err.Error()
	stderr := tail.summary()
	if stderr != "" {
		stderr = "; its stderr: " + stderr
	}
	status := "exit status unknown"
	if cmd.ProcessState != nil { // pc.Kill has waited for the process
		status = cmd.ProcessState.String()
	}
	const unrecognized = "Unrecognized remote plugin message: "
	switch {
	case errors.Is(err, plugin.ErrChecksumsDoNotMatch):
		actual := "unreadable"
		if data, rerr := os.ReadFile(cmd.Path); rerr == nil {
			actual = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		want, _ := parsePin(cfg.SHA256)
		return fmt.Errorf("%s: %w: %s has sha256 %s, the pin is %x; not starting it", label, ErrChecksumMismatch, cmd.Path, actual, want)
	case strings.Contains(msg, unrecognized):
		line := msg[strings.Index(msg, unrecognized)+len(unrecognized):]
		line, _, _ = strings.Cut(line, "\n")
		if line == "" { // it closed stdout, usually by exiting
			return fmt.Errorf("%s: %s: %w before the handshake (%s)%s; is it an mspipe stage plugin?", label, cmd.Path, plugins.ErrPluginExited, status, stderr)
		}
		return fmt.Errorf("%s: %s: %w: it printed %q instead of the plugin handshake%s", label, cmd.Path, ErrNotPlugin, truncate(line, 200), stderr)
	case strings.Contains(msg, "plugin exited before we could connect"):
		return fmt.Errorf("%s: %s: %w before the handshake (%s)%s; is it an mspipe stage plugin?", label, cmd.Path, plugins.ErrPluginExited, status, stderr)
	case strings.Contains(msg, "timeout while waiting for plugin to start"):
		return fmt.Errorf("%s: %s: %w: no handshake within %v%s", label, cmd.Path, ErrStartTimeout, cfg.StartTimeout, stderr)
	case strings.Contains(msg, "ncompatible API version"), strings.Contains(msg, "unsupported plugin protocol"):
		return fmt.Errorf("%s: %s: %w: %s", label, cmd.Path, plugins.ErrIncompatible, strings.ReplaceAll(msg, "\n", " "))
	}
	return fmt.Errorf("%s: start %s: %w", label, cmd.Path, err)
}

// lockedWriter serialises writes from go-plugin's several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
