package report

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadSteps feeds arbitrary events logs to the report's reader and
// draws what it read: it must not fail on any content (a bad line is a
// note), and every chart has a bounded number of finite ticks.
func FuzzReadSteps(f *testing.F) {
	f.Add([]byte(`{"stage":"train","event":"step","rank":0,"epoch":1,"global_step":1,"loss":2.5,"device_memory":100}` + "\n"))
	f.Add([]byte(`{"stage":"t","event":"step","rank":0,"global_step":1,"loss":1e308}` + "\n" +
		`{"stage":"t","event":"step","rank":3,"global_step":2,"loss":-1e308}` + "\n"))
	f.Add([]byte(`{"stage":"t","event":"step","rank":0,"global_step":1,"loss":"NaN"}` + "\n" +
		`{"stage":"t","event":"step","rank":-5,"global_step":-9,"loss":"+Inf","device_memory":-1}`))
	f.Add([]byte(`{"stage":"t","event":"step","rank":0,"global_step":1,"loss":1e15}` + "\n" +
		`{"stage":"t","event":"step","rank":0,"global_step":2,"loss":1.0000000000000001e15}` + "\n"))
	f.Add([]byte("\x00\xff\n{\"event\":\"step\"\n\"event\":\"step\"}"))
	f.Fuzz(func(t *testing.T, events []byte) {
		runDir := filepath.Join(t.TempDir(), "r1")
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(runDir, "events.jsonl"), events, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(context.Background(), filepath.Dir(runDir), runDir, state(nil, nil))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		for sid, ranks := range r.Steps {
			c := lossChart(sid, ranks)
			if c == nil {
				continue
			}
			for _, ticks := range [][]Tick{c.XTicks, c.YTicks} {
				if len(ticks) > maxTicks {
					t.Fatalf("stage %q: %d ticks", sid, len(ticks))
				}
				for _, tk := range ticks {
					if math.IsNaN(tk.Pos) || math.IsInf(tk.Pos, 0) {
						t.Fatalf("stage %q: tick %q at %g", sid, tk.Label, tk.Pos)
					}
				}
			}
			_ = memoryChart(sid, ranks)
		}
	})
}
