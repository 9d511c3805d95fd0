package host

import (
	"context"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/mspipe/mspipe/plugins"
)

// fakeStage is a plugins.Stage whose answers the test sets.
type fakeStage struct {
	desc plugins.Descriptor
	run  func(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error)
}

func (f *fakeStage) Describe(context.Context) (plugins.Descriptor, error) { return f.desc, nil }

func (f *fakeStage) Validate(context.Context, plugins.ValidateRequest) ([]plugins.Problem, error) {
	return nil, nil
}

func (f *fakeStage) Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error) {
	return f.run(ctx, req, emit)
}

// inProcess connects a host-side stage to impl through go-plugin's
// in-process gRPC client/server pair.
func inProcess(t *testing.T, impl plugins.Stage) *plugins.RemoteStage {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, plugins.PluginSet(impl))
	t.Cleanup(func() { client.Close() }) // its Shutdown call stops the server too
	raw, err := client.Dispense(plugins.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	rs, ok := raw.(*plugins.RemoteStage)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	return rs
}
