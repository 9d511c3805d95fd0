package tests

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// On a terminal, a training stage gets a progress bar below the console
// lines, and the bar is gone when the stage ends. The terminal is a
// pseudo-terminal made by script(1) (util-linux), with a size, as a real
// one has.
func TestProgressBarOnTerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) not installed")
	}
	w := newWorkspace(t)
	w.write("bar.yaml", `version: 1
name: bar
cluster: {devices: 2}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 960, test_images: 40, shards: 2}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 3, batch_size: 4, log_steps: 1}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-qfec", "stty cols 120 rows 40; "+mspipeBin+" run bar.yaml", "/dev/null")
	base := w.command(ctx)
	cmd.Dir, cmd.Env = base.Dir, base.Env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mspipe run in a pty: %v\n%s", err, out)
	}
	text := string(out)
	bar := regexp.MustCompile(`\[train\] +\d\d:\d\d +\d+/360 step \[[=>-]+\] +\d+ % ETA \d\d:\d\d  epoch \d, loss `)
	if !bar.MatchString(text) {
		t.Errorf("no progress bar for the train stage in the terminal output:\n%s", tail(text, 1500))
	}
	// The last thing on the terminal is the run's end, not a bar.
	if lines := strings.Split(strings.TrimRight(text, "\r\n"), "\n"); !strings.Contains(lines[len(lines)-2], "succeeded in") {
		t.Errorf("the terminal does not end with the run's summary:\n%s", tail(text, 600))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
