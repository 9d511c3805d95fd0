package cli

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/plugins"
)

// syncBuffer is a bytes.Buffer safe for the bar renderer's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor redraws until out contains every want, or fails after a
// generous deadline (rendering is asynchronous).
func waitFor(t *testing.T, out *syncBuffer, refresh chan<- any, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		refresh <- time.Now()
		got := out.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(got, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output lacks %q; its end:\n%q", missing, got[max(0, len(got)-400):])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Console lines are printed, a stage with progress gets a bar with its
// counts, percentage and message, and a stage that ended loses its bar.
func TestLiveConsoleBars(t *testing.T) {
	out := &syncBuffer{}
	refresh := make(chan any)
	lc := newLiveConsole(out, 100, refresh)
	lc.Write([]byte("[train] started (npu/train)\n"))
	lc.Progress("prepare", plugins.ProgressEvent{Done: 3, Total: 0, Unit: "file"}) // no total: no bar
	lc.Progress("train", plugins.ProgressEvent{Done: 78, Total: 312, Unit: "step", Message: "epoch 1, loss 2.1"})
	waitFor(t, out, refresh, "[train] started (npu/train)\n", "[train]", "78/312 step", "25 %", "epoch 1, loss 2.1", "ETA ", "00:0")
	if strings.Contains(out.String(), "[prepare]") {
		t.Errorf("a stage without a total got a bar:\n%q", out.String())
	}
	lc.Progress("train", plugins.ProgressEvent{Done: 312, Total: 312, Unit: "step", Message: "epoch 2, loss 1.2"})
	waitFor(t, out, refresh, "312/312 step", "100 %", "epoch 2, loss 1.2")

	lc.Ended("train", pipeline.StatusSucceeded)
	lc.Progress("train", plugins.ProgressEvent{Done: 1, Total: 5, Unit: "step", Message: "late"})
	lc.Write([]byte("[train] succeeded in 3s\n"))
	waitFor(t, out, refresh, "[train] succeeded in 3s\n")
	go func() { // Close waits for the last redraw
		for range 50 {
			select {
			case refresh <- time.Now():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	lc.Close()
	lc.Write([]byte("run 1 succeeded\n"))
	got := out.String()
	if !strings.HasSuffix(got, "run 1 succeeded\n") {
		t.Errorf("a line after Close is not at the end of the output:\n%q", got)
	}
	if strings.Contains(got, "late") {
		t.Errorf("progress after the stage ended was drawn:\n%q", got)
	}
}

// Without a terminal (or with --no-progress) the console is the plain
// stderr stream and no bars are drawn.
func TestConsoleWithoutTerminalHasNoBars(t *testing.T) {
	for _, args := range [][]string{nil, {"--no-progress"}} {
		cmd := newRunCmd()
		var stderr bytes.Buffer
		cmd.SetErr(&stderr)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		eng := &pipeline.Engine{}
		attachConsole(cmd, eng)()
		eng.Log.Info().Str("stage", "a").Msg("[a] started (work)")
		if got := stderr.String(); got != "[a] started (work)\n" || eng.Progress != nil {
			t.Errorf("args %q: stderr %q, progress %v; want the line alone and no progress view", args, got, eng.Progress)
		}
	}
}
