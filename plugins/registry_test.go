package plugins

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func newFake() Stage { return &fakeStage{desc: Descriptor{Name: "x"}} }

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	for _, name := range []string{"npu/train", "exec", "cifar/prepare", "ckpt/reshard"} {
		if err := r.Register(Info{Name: name, New: newFake}); err != nil {
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
		info    Info
		wantErr error
		text    string
	}{
		{"duplicate", Info{Name: "exec", New: newFake}, ErrDuplicate, `register stage "exec"`},
		{"empty", Info{New: newFake}, ErrInvalidName, "empty"},
		{"bad", Info{Name: "NPU/Train", New: newFake}, ErrInvalidName, "must start with a lower-case letter"},
		{"no constructor", Info{Name: "npu/eval"}, nil, "no constructor"},
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

func TestValidateName(t *testing.T) {
	valid := []string{"exec", "npu/train", "cifar/prepare", "acme/data-augment", "a/b/c", "x1_y"}
	for _, name := range valid {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v", name, err)
		}
	}
	invalid := map[string]string{
		"":                       "empty",
		"/exec":                  "empty segment 1",
		"npu/":                   "empty segment 2",
		"npu//train":             "empty segment 2",
		"1npu":                   "must start with a lower-case letter",
		"npu/-x":                 "must start with a lower-case letter",
		"npu.train":              "character '.' not allowed",
		"npu train":              "character ' ' not allowed",
		"../etc":                 "must start with a lower-case letter",
		"Exec":                   "must start with a lower-case letter",
		strings.Repeat("a", 129): "longer than 128 bytes",
	}
	for name, want := range invalid {
		err := ValidateName(name)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateName(%.20q) = %v, want %q", name, err, want)
		}
	}
}

func TestBinaryName(t *testing.T) {
	for name, want := range map[string]string{"exec": "mspipe-stage-exec", "acme/augment": "mspipe-stage-acme-augment"} {
		if got := BinaryName(name); got != want {
			t.Errorf("BinaryName(%q) = %q, want %q", name, got, want)
		}
	}
}
