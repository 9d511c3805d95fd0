package host

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

func outputsDescriptor() plugins.Descriptor {
	return plugins.Descriptor{
		Name:    "test/fake",
		Version: "1.2.3",
		Outputs: []plugins.OutputSpec{
			{Name: "count", Type: plugins.TypeInt},
			{Name: "loss", Type: plugins.TypeFloat},
			{Name: "dir", Type: plugins.TypePath},
		},
		ProtocolVersions: []int{plugins.ProtocolVersion},
	}
}

func TestClientChecksOutputs(t *testing.T) {
	tests := []struct {
		name    string
		outputs map[string]any
		want    map[string]any
		wantErr string
	}{
		{"ok", map[string]any{"count": 3, "loss": 2, "dir": "out"},
			map[string]any{"count": int64(3), "loss": 2.0, "dir": "/work/out"}, ""},
		{"int is a string", map[string]any{"count": "abc", "loss": 1.5, "dir": "/abs"},
			nil, `stage "test/fake": outputs do not match the declared outputs: output "count": want int, got string "abc"`},
		{"int is a float", map[string]any{"count": 2.5, "loss": 1.5, "dir": "/abs"}, nil, `output "count": want int, got number 2.5`},
		{"missing and undeclared", map[string]any{"count": 1, "dir": "d", "extra": true}, nil,
			`output "extra" is not declared; output "loss" is declared but missing`},
		{"empty path", map[string]any{"count": 1, "loss": 1.0, "dir": ""}, nil, `output "dir": want a path, got an empty string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gc := inProcess(t, &fakeStage{run: func(context.Context, plugins.RunRequest, func(plugins.Event)) (map[string]any, error) {
				return tt.outputs, nil
			}})
			c := &Client{label: "plugin test", stage: gc, desc: outputsDescriptor()}
			got, err := c.Run(context.Background(), plugins.RunRequest{WorkDir: "/work"}, nil)
			if tt.wantErr != "" {
				if !errors.Is(err, plugins.ErrBadOutput) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want plugins.ErrBadOutput containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("outputs = %#v, want %#v", got, tt.want)
			}
		})
	}
}
