package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
	"github.com/mspipe/mspipe/plugins/sdk/sdktest"
)

type echoWith struct {
	Text  string `json:"text"`
	Times int    `json:"times,omitempty" jsonschema:"default=2"`
}

// echo writes Text Times times into its work directory, logging each line
// from its own goroutine on stream "out", and says where it ran on "meta".
var echo = sdk.Stage[echoWith]{
	Name:    "test/echo",
	Version: "1.0.0",
	Outputs: []plugins.OutputSpec{{Name: "file", Type: plugins.TypePath}},
	Execute: func(ctx context.Context, sc sdk.Context, w echoWith) (map[string]any, error) {
		if w.Text == "fail" {
			return nil, errors.New("asked to fail")
		}
		req := sc.Request()
		sc.Info(fmt.Sprintf("%s %s attempt %d on %d devices", req.RunID, req.StageID, req.Attempt, req.Cluster.Devices), "stream", "meta")
		var wg sync.WaitGroup
		for i := range w.Times {
			wg.Add(1)
			go func() { defer wg.Done(); sc.Info(fmt.Sprintf("%s %d", w.Text, i), "stream", "out") }()
		}
		wg.Wait()
		path := filepath.Join(sc.WorkDir(), "echo.txt")
		return map[string]any{"file": path}, os.WriteFile(path, []byte(w.Text), 0o644)
	},
}

func TestRunFillsTheRequestAndCollects(t *testing.T) {
	r := sdktest.Run(context.Background(), t, echo, plugins.RunRequest{StageID: "e", With: map[string]any{"text": "hi", "times": int64(3)}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	req := r.Request
	if req.RunID != "r1" || req.Attempt != 1 || req.Cluster.Devices != 1 || req.WorkDir == "" {
		t.Errorf("request = %+v, want run r1, attempt 1, 1 device and a work dir", req)
	}
	file, _ := r.Outputs["file"].(string)
	if data, err := os.ReadFile(file); err != nil || string(data) != "hi" || filepath.Dir(file) != req.WorkDir {
		t.Errorf("output file %q: %q, %v; want hi in %s", file, data, err, req.WorkDir)
	}
	if got := r.Logs("stream", "meta"); !slices.Equal(got, []string{"r1 e attempt 1 on 1 devices"}) {
		t.Errorf("meta logs = %q", got)
	}
	out := r.Logs("stream", "out")
	slices.Sort(out)
	if !slices.Equal(out, []string{"hi 0", "hi 1", "hi 2"}) {
		t.Errorf("out logs = %q, want the three lines the goroutines logged", out)
	}
	if n := len(r.Logs("", "")); n != 4 || len(r.Events()) < 4 {
		t.Errorf("%d log events of %d events, want 4 logs", n, len(r.Events()))
	}
}

func TestRunKeepsWhatTheRequestSays(t *testing.T) {
	work := t.TempDir()
	r := sdktest.Run(context.Background(), t, echo, plugins.RunRequest{RunID: "r9", StageID: "e", WorkDir: work, Attempt: 2,
		Cluster: plugins.Cluster{Devices: 8}, With: map[string]any{"text": "x", "times": int64(1)}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Logs("stream", "meta"); !slices.Equal(got, []string{"r9 e attempt 2 on 8 devices"}) || r.Request.WorkDir != work {
		t.Errorf("meta logs = %q, work dir %s; want the request's own values", got, r.Request.WorkDir)
	}
}

func TestRunReturnsTheStageError(t *testing.T) {
	r := sdktest.Run(context.Background(), t, echo, plugins.RunRequest{With: map[string]any{"text": "fail"}})
	if r.Err == nil || r.Outputs != nil {
		t.Errorf("outputs %v, err %v; want the stage's error", r.Outputs, r.Err)
	}
	// The SDK's decoding runs as in a real run: a wrong type is refused.
	r = sdktest.Run(context.Background(), t, echo, plugins.RunRequest{With: map[string]any{"text": "a", "times": "two"}})
	if r.Err == nil {
		t.Error("times: \"two\" accepted")
	}
}
