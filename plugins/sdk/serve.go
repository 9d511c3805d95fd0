package sdk

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/mspipe/mspipe/plugins"
)

// Serve runs s as an mspipe stage plugin and returns when mspipe stops it.
// SIGTERM cancels a running stage's context and Serve returns once the stage
// has returned. Run by hand instead of by mspipe, it prints what the binary
// is and how to use it, and exits with status 1. Call it from main.
func Serve(s plugins.Stage) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := ServeContext(ctx, s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1) // this is the plugin's main; nothing else runs after it
	}
}

// ServeContext is Serve for callers that own the process: it serves s until
// mspipe stops the plugin or ctx is done. When ctx is done, running stages
// see their context cancelled and ServeContext returns nil once they have
// returned. The process becomes the reaper of everything the stage starts
// (superviseDescendants): on Linux, when ServeContext returns, and at once
// when mspipe dies ([plugins.ParentDeathSignal]), every process below it is
// killed, even one that left its process group with setsid. Without
// mspipe's handshake cookie in the environment it returns an error
// wrapping ErrNotLaunched whose text explains how to use the plugin.
func ServeContext(ctx context.Context, s plugins.Stage) error {
	if os.Getenv(plugins.MagicCookieKey) != plugins.MagicCookieValue {
		return notLaunched(ctx, s)
	}
	// Everything the stage starts stays below this process, which takes it
	// down when it ends or when mspipe is killed (the parent-death signal
	// the host set). Without a subreaper (an old kernel) the process groups
	// still end with their stage.
	parentGone, err := superviseDescendants()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mspipe stage plugin: %v\n", err)
	}
	defer func() {
		if err := killDescendants(); err != nil {
			fmt.Fprintf(os.Stderr, "mspipe stage plugin: %v\n", err)
		}
	}()
	srv := &served{stage: s, base: ctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: plugins.Handshake(),
			Plugins:         plugins.PluginSet(srv),
			GRPCServer:      plugin.DefaultGRPCServer,
			TLSProvider:     plugins.ServerTLSConfig,
		})
	}()
	select {
	case <-done:
	case <-ctx.Done():
		srv.drain()
	case <-parentGone:
		// mspipe is gone and nobody reads the results: no grace for the
		// stage, its processes are killed on the way out.
	}
	return nil
}

func notLaunched(ctx context.Context, s plugins.Stage) error {
	prog := filepath.Base(os.Args[0])
	d, err := (&served{stage: s, base: ctx}).Describe(ctx)
	if err != nil || d.Name == "" {
		return notLaunchedError{fmt.Sprintf("%s is an mspipe stage plugin; mspipe starts it, it is not meant to be run by hand", prog)}
	}
	about := fmt.Sprintf("stage %q version %s", d.Name, d.Version)
	if d.Description != "" {
		about += ": " + strings.TrimSuffix(d.Description, ".")
	}
	return notLaunchedError{fmt.Sprintf(`%s is an mspipe stage plugin (%s).
mspipe starts it; it is not meant to be run by hand. To use it:
  1. install it as %s in ./plugins, in a directory of $MSPIPE_PLUGIN_PATH,
     or in ~/.config/mspipe/plugins (or refer to it by path: uses: ./path/to/%s);
  2. add a stage with "uses: %s" to a pipeline and run: mspipe run pipeline.yaml`,
		prog, about, plugins.BinaryName(d.Name), prog, d.Name)}
}

// notLaunchedError is the guidance printed when a plugin is run by hand.
type notLaunchedError struct{ msg string }

func (e notLaunchedError) Error() string { return e.msg }
func (e notLaunchedError) Unwrap() error { return ErrNotLaunched }

// served wraps the author's stage: it turns panics into errors, cancels
// running stages when the plugin is told to stop and waits for them.
type served struct {
	stage plugins.Stage
	base  context.Context // done when the plugin must stop

	mu      sync.Mutex
	closing bool
	running int // Runs in progress; guarded by mu
	active  sync.WaitGroup
}

func (s *served) Describe(ctx context.Context) (d plugins.Descriptor, err error) {
	defer recoverPanic(&err)
	d, err = s.stage.Describe(ctx)
	if len(d.ProtocolVersions) == 0 {
		d.ProtocolVersions = []int{plugins.ProtocolVersion}
	}
	return d, err
}

func (s *served) Validate(ctx context.Context, req plugins.ValidateRequest) (p []plugins.Problem, err error) {
	defer recoverPanic(&err)
	return s.stage.Validate(ctx, req)
}

func (s *served) Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (out map[string]any, err error) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, errShuttingDown
	}
	s.active.Add(1)
	s.running++
	s.mu.Unlock()
	defer s.active.Done()
	defer s.endRun()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	defer func() {
		if r := recover(); r != nil {
			stack := string(debug.Stack())
			// An event, unlike stderr, reaches the host before the error does.
			emit(plugins.Event{Time: time.Now(), Log: &plugins.LogEvent{Level: plugins.LevelError, Message: "stage panicked",
				Fields: map[string]any{"panic": fmt.Sprint(r), "stack": stack}}})
			err = fmt.Errorf("stage panicked: %v%s", r, panicSite())
		}
	}()
	return s.stage.Run(ctx, req, emit)
}

// endRun ends a Run. When it was the only one, whatever it started and left
// behind is killed before its reply reaches mspipe, as when the process
// ends, and collected: mspipe may serve its next stage from this process
// (see plugins.Info.Reusable), and that stage must not find the previous
// one's processes, not even as zombies. A Run that starts meanwhile waits on s.mu, so
// none of its processes is taken for a leftover.
func (s *served) endRun() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if s.running > 0 {
		return
	}
	if err := killDescendants(); err != nil {
		fmt.Fprintf(os.Stderr, "mspipe stage plugin: %v\n", err)
	}
	reapExited()
}

// drain refuses new runs and waits for the running ones to return.
func (s *served) drain() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.active.Wait()
}

// recoverPanic turns a panic of Describe or Validate into an error naming
// the panic site; the stack goes to stderr, which mspipe writes to the
// stage log.
func recoverPanic(errp *error) {
	r := recover()
	if r == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "panic: %v\n\n%s", r, debug.Stack())
	*errp = fmt.Errorf("stage panicked: %v%s", r, panicSite())
}

// panicSite is " (at file:line in function)" for the frame that panicked:
// the first frame below runtime.gopanic that is not in the runtime.
func panicSite() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	seenPanic := false
	for {
		f, more := frames.Next()
		if seenPanic && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf(" (at %s:%d in %s)", filepath.Base(f.File), f.Line, f.Function)
		}
		if f.Function == "runtime.gopanic" {
			seenPanic = true
		}
		if !more {
			return ""
		}
	}
}
