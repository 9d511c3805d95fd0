package host

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

func newFake() plugins.Stage { return &fakeStage{desc: plugins.Descriptor{Name: "x"}} }

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	for _, name := range []string{"npu/train", "exec", "cifar/prepare", "ckpt/reshard"} {
		if err := r.Register(plugins.Info{Name: name, New: newFake}); err != nil {
			t.Fatalf("Register(%q): %v", name, err)
		}
	}
	if got, want := r.Names(), []string{"cifar/prepare", "ckpt/reshard", "exec", "npu/train"}; !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	info, ok := r.Lookup("npu/train")
	if !ok || info.Name != "npu/train" {
		t.Fatalf("Lookup = %v, %v", info, ok)
	}
	if d, _ := info.New().Describe(context.Background()); d.Name != "x" {
		t.Errorf("New gave %v", d)
	}
	if _, ok := r.Lookup("npu"); ok {
		t.Error("Lookup of an unregistered name succeeded")
	}

	tests := []struct {
		name    string
		info    plugins.Info
		wantErr error
		text    string
	}{
		{"duplicate", plugins.Info{Name: "exec", New: newFake}, ErrDuplicate, `register stage "exec"`},
		{"empty", plugins.Info{New: newFake}, plugins.ErrInvalidName, "empty"},
		{"bad", plugins.Info{Name: "NPU/Train", New: newFake}, plugins.ErrInvalidName, "must start with a lower-case letter"},
		{"no constructor", plugins.Info{Name: "npu/eval"}, nil, "no constructor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Register(tt.info)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %v, want %v containing %q", err, tt.wantErr, tt.text)
			}
		})
	}
	if len(r.Names()) != 4 {
		t.Errorf("failed registrations changed the registry: %v", r.Names())
	}
}
