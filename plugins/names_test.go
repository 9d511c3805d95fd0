package plugins

import (
	"errors"
	"strings"
	"testing"
)

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
