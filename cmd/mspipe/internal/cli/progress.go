package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/mspipe/mspipe/internal/bytesize"
	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/plugins"
)

// liveConsole prints a run's console lines with, below them, one progress
// bar per running stage that reports progress. It is used on terminals
// only: elsewhere the console lines are all there is.
type liveConsole struct {
	out io.Writer
	p   *mpb.Progress

	mu     sync.Mutex
	bars   map[string]*stageBar
	ended  map[string]bool
	closed bool
}

// stageBar is the bar of one stage and the message shown after it.
type stageBar struct {
	bar  *mpb.Bar
	unit string
	msg  atomic.Pointer[string] // read by the bar's render goroutine
}

// isTerminal reports whether w is a terminal that can redraw bars: one
// that knows its size (a pseudo-terminal of a script may not).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	width, height, err := term.GetSize(int(f.Fd()))
	return err == nil && width > 0 && height > 0
}

// newLiveConsole draws on out every 150 ms, as wide as the terminal. Tests
// pass a width and a channel that triggers each redraw.
func newLiveConsole(out io.Writer, width int, manualRefresh <-chan any) *liveConsole {
	opts := []mpb.ContainerOption{mpb.WithOutput(out), mpb.WithAutoRefresh()}
	if width > 0 {
		opts = append(opts, mpb.WithWidth(width))
	}
	if manualRefresh != nil {
		opts = append(opts, mpb.WithManualRefresh(manualRefresh))
	} else {
		opts = append(opts, mpb.WithRefreshRate(150*time.Millisecond))
	}
	return &liveConsole{out: out, p: mpb.New(opts...), bars: map[string]*stageBar{}, ended: map[string]bool{}}
}

// Write prints console lines above the bars.
func (c *liveConsole) Write(b []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if !closed {
		n, err := c.p.Write(b)
		if !errors.Is(err, mpb.ErrDone) {
			return n, err
		}
	}
	return c.out.Write(b)
}

// Progress updates (or starts) the bar of a stage. Progress without a
// total has nothing to draw a bar of and is left to the logs.
func (c *liveConsole) Progress(stage string, ev plugins.ProgressEvent) {
	if ev.Total <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.ended[stage] {
		return
	}
	sb := c.bars[stage]
	if sb != nil && sb.unit != ev.Unit {
		// A stage's outputs were hashed (bytes) before it ran (steps).
		sb.bar.Abort(true)
		sb = nil
	}
	if sb == nil {
		sb = &stageBar{unit: ev.Unit}
		unit := ev.Unit
		sb.bar = c.p.AddBar(ev.Total,
			mpb.PrependDecorators(decor.Name("["+stage+"] ", decor.WCSyncSpaceR),
				decor.Elapsed(decor.ET_STYLE_MMSS, decor.WCSyncSpace),
				decor.Any(func(s decor.Statistics) string { return progressCount(s.Current, s.Total, unit) }, decor.WCSyncSpace)),
			mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Name(" ETA "), decor.AverageETA(decor.ET_STYLE_MMSS), decor.Any(func(decor.Statistics) string {
				if m := sb.msg.Load(); m != nil {
					return "  " + *m
				}
				return ""
			})),
			mpb.BarRemoveOnComplete(),
		)
		c.bars[stage] = sb
	}
	msg := ev.Message
	sb.msg.Store(&msg)
	sb.bar.SetTotal(ev.Total, false)
	sb.bar.SetCurrent(min(ev.Done, ev.Total))
}

// progressCount is "done/total unit", sizes for bytes ("1.2 GiB/2.0 GiB").
func progressCount(done, total int64, unit string) string {
	if unit == "bytes" {
		return bytesize.Format(done) + "/" + bytesize.Format(total)
	}
	return fmt.Sprintf("%d/%d %s", done, total, unit)
}

// Ended removes the bar of a stage that ended.
func (c *liveConsole) Ended(stage string, _ pipeline.Status) {
	c.mu.Lock()
	sb := c.bars[stage]
	delete(c.bars, stage)
	c.ended[stage] = true
	c.mu.Unlock()
	if sb != nil {
		sb.bar.Abort(true)
	}
}

// Close removes the remaining bars and flushes the lines; later lines go
// straight to the output.
func (c *liveConsole) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	bars := c.bars
	c.bars = nil
	c.mu.Unlock()
	for _, sb := range bars {
		sb.bar.Abort(true)
	}
	c.p.Wait()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// addProgressFlag adds --no-progress and --output to a command that runs
// stages.
func addProgressFlag(cmd *cobra.Command) {
	cmd.Flags().Bool("no-progress", false, "no progress bars, console lines only (bars are drawn only when stderr is a terminal)")
	cmd.Flags().String("output", "", "text (lines for people; on a terminal a live view: per running stage its elapsed time, step, loss, images/s and ETA) or json (one JSON object per event, for machines); the same as --log-format")
	_ = cmd.Flags().SetAnnotation("output", outputFormatFlag, []string{"true"})
}

// attachConsole points the engine's console at the command's stderr, with
// progress bars when stderr is a terminal and --no-progress is not given.
// The returned function ends the bars; call it when the run is over.
func attachConsole(cmd *cobra.Command, eng *pipeline.Engine) (done func()) {
	out := cmd.ErrOrStderr()
	eng.Log = newLogger(cmd, out)
	if off, _ := cmd.Flags().GetBool("no-progress"); off || logFormat(cmd) == "json" || !isTerminal(out) {
		return func() {}
	}
	lc := newLiveConsole(out, 0, nil)
	eng.Log, eng.Progress = newLogger(cmd, lc), lc
	return lc.Close
}
