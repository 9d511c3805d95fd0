package tests

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLogFormatJSON: with --log-format json every stderr line is one JSON
// object naming its event, and the messages are the lines the text format
// prints (run ids and durations aside).
func TestLogFormatJSON(t *testing.T) {
	w := newWorkspace(t)
	w.write("fan.yaml", fanSpec)
	text := w.run("run", "fan.yaml", "--no-cache")
	js := w.run("run", "fan.yaml", "--no-cache", "--log-format", "json")
	if text.code != 0 || js.code != 0 {
		t.Fatalf("exit %d and %d\n%s\n%s", text.code, js.code, text.stderr, js.stderr)
	}
	var messages []string
	events := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(js.stderr), "\n") {
		var ev struct {
			Event, Stage, Run, Message string
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		if ev.Event == "" || ev.Run != strings.TrimSpace(js.stdout) {
			t.Errorf("line %q: event %q, run %q", line, ev.Event, ev.Run)
		}
		events[ev.Event]++
		messages = append(messages, ev.Message)
	}
	if events["stage_started"] != 4 || events["stage_succeeded"] != 4 || events["run_finished"] != 1 {
		t.Errorf("events %v, want 4 stages started and succeeded, one run finished", events)
	}
	norm := regexp.MustCompile(`[0-9]{8}-[0-9]{6}-[0-9a-f]{6}|[0-9.]+m?s\b`)
	sorted := func(lines []string) string {
		for i, l := range lines {
			lines[i] = norm.ReplaceAllString(l, "X")
		}
		// Independent stages interleave differently from run to run.
		slices.Sort(lines)
		return strings.Join(lines, "\n")
	}
	if a, b := sorted(strings.Split(strings.TrimSpace(text.stderr), "\n")), sorted(messages); a != b {
		t.Errorf("text lines:\n%s\njson messages:\n%s", a, b)
	}
	if r := w.run("run", "fan.yaml", "--log-format", "yaml"); r.code != 2 || !strings.Contains(r.stderr, `--log-format "yaml": want text or json`) {
		t.Errorf("--log-format yaml: exit %d, %q", r.code, r.stderr)
	}
	// --output is the same switch.
	out := w.run("run", "fan.yaml", "--no-cache", "--output", "json")
	if lines := strings.Split(strings.TrimSpace(out.stderr), "\n"); out.code != 0 || len(lines) != len(strings.Split(strings.TrimSpace(js.stderr), "\n")) || !json.Valid([]byte(lines[0])) {
		t.Errorf("--output json: exit %d, stderr:\n%s", out.code, out.stderr)
	}
	if r := w.run("run", "fan.yaml", "--output", "yaml"); r.code != 2 || !strings.Contains(r.stderr, `--output "yaml": want text or json`) {
		t.Errorf("--output yaml: exit %d, %q", r.code, r.stderr)
	}
}
