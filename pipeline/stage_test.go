package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// sleeps records the waits the engine asks for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) Sleep(_ context.Context, d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// failFirst fails the first n Runs of a stage with "boom <attempt>".
func failFirst(n int) func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
	return func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if c.req.Attempt <= n {
			return nil, fmt.Errorf("boom %d", c.req.Attempt)
		}
		return map[string]any{"n": c.req.Attempt}, nil
	}
}

// TestRetrySucceedsOnALaterAttempt: a stage failing twice with
// max_attempts 3 succeeds on the third attempt; run.json counts three
// attempts, the backoff doubles between them, and each attempt number
// reaches the plugin.
func TestRetrySucceedsOnALaterAttempt(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: failFirst(2)}
	e := w.engine(l)
	var sl sleeps
	e.Sleep = sl.Sleep
	st := w.mustRun(e, "version: 1\nname: r\nstages:\n  a: {uses: work, retry: {max_attempts: 3, backoff: 5s}}\n")
	ss := st.Stages["a"]
	if ss.Status != StatusSucceeded || ss.Attempts != 3 || ss.Outputs["n"] != 3 {
		t.Errorf("a = %s after %d attempts, outputs %v; want succeeded after 3, n=3", ss.Status, ss.Attempts, ss.Outputs)
	}
	if fmt.Sprint(sl.d) != "[5s 10s]" {
		t.Errorf("backoffs %v, want [5s 10s]", sl.d)
	}
	var attempts []int
	for _, c := range l.calls {
		attempts = append(attempts, c.req.Attempt)
	}
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Errorf("attempts seen by the plugin %v, want [1 2 3]", attempts)
	}
	saved, err := LoadState(filepath.Join(w.store.Dir, st.ID))
	if err != nil {
		t.Fatal(err)
	}
	if saved.Stages["a"].Attempts != 3 {
		t.Errorf("run.json: %d attempts, want 3", saved.Stages["a"].Attempts)
	}
}

// TestRetryReportsTheLastAttempt: a stage that fails every attempt runs
// exactly max_attempts times and fails with the error of the last attempt,
// as a StageError naming the stage and attempt.
func TestRetryReportsTheLastAttempt(t *testing.T) {
	for _, max := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			w := newWorkspace(t)
			l := &scriptLauncher{run: failFirst(100)}
			e := w.engine(l)
			var sl sleeps
			e.Sleep = sl.Sleep
			st, err := w.run(e, fmt.Sprintf("version: 1\nname: r\nstages:\n  a: {uses: work, retry: {max_attempts: %d, backoff: 1s}}\n  b: {uses: work, needs: a}\n", max))
			if got := len(l.ran()); got != max {
				t.Errorf("%d runs, want %d", got, max)
			}
			if len(sl.d) != max-1 {
				t.Errorf("%d waits, want %d", len(sl.d), max-1)
			}
			want := fmt.Sprintf("boom %d", max)
			ss := st.Stages["a"]
			if ss.Status != StatusFailed || ss.Attempts != max || ss.Reason != want {
				t.Errorf("a = %s, %d attempts, reason %q; want failed, %d, %q", ss.Status, ss.Attempts, ss.Reason, max, want)
			}
			if !errors.Is(err, ErrStageFailed) {
				t.Fatalf("err %v, want ErrStageFailed", err)
			}
			var se *StageError
			if !errors.As(err, &se) || se.Stage != "a" || se.Attempt != max || se.Err.Error() != want {
				t.Errorf("StageError %+v, want stage a, attempt %d, %q", se, max, want)
			}
			if got, want := err.Error(), "run "+st.ID+": stage failed: stage a failed: "+want; got != want {
				t.Errorf("error %q, want %q", got, want)
			}
			if st.Error != "stage a failed: "+want {
				t.Errorf("run error %q", st.Error)
			}
			if b := st.Stages["b"]; b.Status != StatusPending || b.Reason != "not run: stage a failed" {
				t.Errorf("b = %s %q, want pending, not run", b.Status, b.Reason)
			}
		})
	}
}

// TestStageErrorKeepsItsCause: the plugin's error value, not only its
// text, reaches the caller of Run.
func TestStageErrorKeepsItsCause(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		return nil, fmt.Errorf("stage said no: %w", plugins.ErrPluginExited)
	}}
	_, err := w.run(w.engine(l), "version: 1\nname: r\nstages:\n  a: {uses: work}\n")
	if !errors.Is(err, plugins.ErrPluginExited) {
		t.Errorf("err %v does not wrap plugins.ErrPluginExited", err)
	}
}

// TestTimeoutWhenTheContextFires: a plugin that waits for its context is
// stopped by the stage timeout and fails "timed out after …", wrapping
// ErrTimeout; a retry gets a fresh timeout.
func TestTimeoutWhenTheContextFires(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(ctx context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	e := w.engine(l)
	e.Sleep = (&sleeps{}).Sleep
	st, err := w.run(e, "version: 1\nname: r\nstages:\n  a: {uses: work, timeout: 20ms, retry: 2}\n")
	if ss := st.Stages["a"]; ss.Status != StatusFailed || ss.Reason != "timed out after 20ms" || ss.Attempts != 2 {
		t.Errorf("a = %s %q after %d attempts, want failed: timed out after 20ms, 2 attempts", ss.Status, ss.Reason, ss.Attempts)
	}
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("err %v, want ErrTimeout", err)
	}
}

// TestTimeoutWinsOverTheStreamReset reproduces the race behind a flaky
// end-to-end test: at the stage's deadline the plugin's side of the stream
// resets it, and that error can reach the host before the host's own
// context timer has fired. The fake plugin moves the engine's clock past
// the deadline and returns that error at once, while the real context
// (one hour) is still alive: the stage must still read "timed out after".
func TestTimeoutWinsOverTheStreamReset(t *testing.T) {
	w := newWorkspace(t)
	clock := newFakeClock()
	l := &scriptLauncher{run: func(ctx context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		clock.Advance(time.Hour)
		if ctx.Err() != nil {
			t.Error("the real context ended; the race is not reproduced")
		}
		return nil, errors.New("stream terminated by RST_STREAM with error code: CANCEL")
	}}
	e := w.engine(l)
	e.Now = clock.Now
	st, _ := w.run(e, "version: 1\nname: r\nstages:\n  a: {uses: work, timeout: 1h}\n")
	if ss := st.Stages["a"]; ss.Status != StatusFailed || ss.Reason != "timed out after 1h0m0s" {
		t.Errorf("a = %s %q, want failed: timed out after 1h0m0s", ss.Status, ss.Reason)
	}
}

// TestErrorBeforeTheDeadlineIsNotATimeout: a plugin failing before its
// deadline fails with its own error.
func TestErrorBeforeTheDeadlineIsNotATimeout(t *testing.T) {
	w := newWorkspace(t)
	clock := newFakeClock()
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		clock.Advance(59 * time.Minute)
		return nil, errors.New("disk full")
	}}
	e := w.engine(l)
	e.Now = clock.Now
	st, _ := w.run(e, "version: 1\nname: r\nstages:\n  a: {uses: work, timeout: 1h}\n")
	if ss := st.Stages["a"]; ss.Reason != "disk full" || ss.Seconds != 3540 {
		t.Errorf("a = %q after %vs, want disk full after 3540s", ss.Reason, ss.Seconds)
	}
}

// TestLaunchFailure: a plugin that cannot start fails its stage with the
// launcher's error, and each attempt tries again.
func TestLaunchFailure(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{launchErr: errors.New("exec format error")}
	e := w.engine(l)
	e.Sleep = (&sleeps{}).Sleep
	st, err := w.run(e, "version: 1\nname: r\nstages:\n  a: {uses: work, retry: 2}\n")
	if ss := st.Stages["a"]; ss.Status != StatusFailed || ss.Reason != "exec format error" || ss.Attempts != 2 {
		t.Errorf("a = %s %q after %d attempts", ss.Status, ss.Reason, ss.Attempts)
	}
	if !errors.Is(err, l.launchErr) {
		t.Errorf("err %v does not wrap the launch error", err)
	}
}

// TestDeclaredOutputs: outputs the spec declares are converted to their
// type; a missing one or one of the wrong type fails the stage.
func TestDeclaredOutputs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outputs map[string]any
		want    string // reason; "" for success
	}{
		{"converted", map[string]any{"loss": 5 / 2.0}, ""},
		{"int to float", map[string]any{"loss": 3}, ""},
		{"missing", map[string]any{}, `the stage did not produce output "loss", which the spec declares`},
		{"wrong type", map[string]any{"loss": "high"}, `output "loss": expected a number, got high`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkspace(t)
			l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
				return tc.outputs, nil
			}}
			st, _ := w.run(w.engine(l), "version: 1\nname: o\nstages:\n  a: {uses: work, outputs: {loss: float}}\n")
			ss := st.Stages["a"]
			if tc.want == "" {
				want, _ := tc.outputs["loss"].(float64)
				if n, ok := tc.outputs["loss"].(int); ok {
					want = float64(n)
				}
				if ss.Status != StatusSucceeded || ss.Outputs["loss"] != want {
					t.Errorf("a = %s, outputs %#v; want succeeded, loss %v as float64", ss.Status, ss.Outputs, want)
				}
				return
			}
			if ss.Status != StatusFailed || !strings.HasPrefix(ss.Reason, tc.want) {
				t.Errorf("a = %s %q, want failed: %q", ss.Status, ss.Reason, tc.want)
			}
		})
	}
}

// TestCancelDuringBackoff: cancelling while a stage waits to retry ends it
// cancelled without another attempt.
func TestCancelDuringBackoff(t *testing.T) {
	w := newWorkspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &scriptLauncher{run: failFirst(100)}
	e := w.engine(l)
	e.Sleep = func(ctx context.Context, _ time.Duration) { cancel(); <-ctx.Done() }
	p := w.load("version: 1\nname: r\nstages:\n  a: {uses: work, retry: {max_attempts: 3, backoff: 1h}}\n")
	st, err := e.Run(ctx, p, nil, nil)
	if !errors.Is(err, context.Canceled) || st.Status != StatusCancelled {
		t.Fatalf("err %v, run %s", err, st.Status)
	}
	if ss := st.Stages["a"]; ss.Status != StatusCancelled || ss.Reason != "interrupted" || len(l.ran()) != 1 {
		t.Errorf("a = %s %q after %d runs", ss.Status, ss.Reason, len(l.ran()))
	}
}

// TestDefaultSleepEndsWithTheContext: without an injected Sleep the wait
// between attempts ends when the context does.
func TestDefaultSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() { (&Engine{}).sleep(ctx, time.Hour); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("sleep did not end with its context")
	}
}
