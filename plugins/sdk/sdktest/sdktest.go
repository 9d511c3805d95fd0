// Package sdktest runs a stage inside a test the way mspipe runs it as a
// plugin, without starting a process, as net/http/httptest serves a
// handler without a network: one call hands the stage a request with a
// fresh work directory and collects its outputs, its error and every event
// it sends.
//
//	r := sdktest.Run(context.Background(), t, integrate.New(),
//		plugins.RunRequest{StageID: "integrate", With: with})
//	if r.Err != nil {
//		t.Fatal(r.Err)
//	}
//	dir := r.Outputs["dir"].(string)
//
// It drives the stage through plugins.Stage, the interface the protocol
// serves, so what a test sees is what a run would: the SDK's decoding of
// the `with` block, its defaults and its checks included.
package sdktest

import (
	"context"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// Result is one run of a stage: the request it was given, defaults filled
// in, and what it gave back.
type Result struct {
	Request plugins.RunRequest
	Outputs map[string]any
	Err     error

	mu     sync.Mutex
	events []plugins.Event
}

// Run runs stage once with req, whose empty fields take the values of a
// first attempt in a fresh directory: RunID "r1", WorkDir a new
// t.TempDir(), Cluster.Devices 1, Attempt 1. It returns when the stage's
// Run does; events may come from several goroutines of the stage.
func Run(ctx context.Context, t testing.TB, stage plugins.Stage, req plugins.RunRequest) *Result {
	t.Helper()
	if req.RunID == "" {
		req.RunID = "r1"
	}
	if req.WorkDir == "" {
		req.WorkDir = t.TempDir()
	}
	if req.Cluster.Devices == 0 {
		req.Cluster.Devices = 1
	}
	if req.Attempt == 0 {
		req.Attempt = 1
	}
	r := &Result{Request: req}
	r.Outputs, r.Err = stage.Run(ctx, req, func(e plugins.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, e)
	})
	return r
}

// Events returns the events the stage sent, in the order they came.
func (r *Result) Events() []plugins.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]plugins.Event(nil), r.events...)
}

// Logs returns the messages of the log events whose field key is value
// (a stage's "stream" field, say), in order; key "" takes every log event.
func (r *Result) Logs(key, value string) []string {
	var out []string
	for _, e := range r.Events() {
		if e.Log != nil && (key == "" || e.Log.Fields[key] == value) {
			out = append(out, e.Log.Message)
		}
	}
	return out
}
