package plugins

import (
	"fmt"
	"strings"
)

// maxNameLen bounds stage names; a binary name adds 13 bytes to it.
const maxNameLen = 128

// ValidateName checks a stage name: one or more segments separated by "/",
// each a lower-case letter followed by lower-case letters, digits, "_" or
// "-" ("exec", "npu/train", "acme/data-augment").
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("%w %q: longer than %d bytes", ErrInvalidName, truncate(name, 40), maxNameLen)
	}
	for i, seg := range strings.Split(name, "/") {
		if seg == "" {
			return fmt.Errorf("%w %q: empty segment %d", ErrInvalidName, name, i+1)
		}
		for j, c := range seg {
			switch {
			case 'a' <= c && c <= 'z':
			case j > 0 && ('0' <= c && c <= '9' || c == '_' || c == '-'):
			case j == 0:
				return fmt.Errorf("%w %q: segment %q must start with a lower-case letter", ErrInvalidName, name, seg)
			default:
				return fmt.Errorf("%w %q: character %q not allowed (use a-z, 0-9, '_', '-' and '/')", ErrInvalidName, name, c)
			}
		}
	}
	return nil
}

// BinaryPrefix starts the file name of every external stage plugin.
const BinaryPrefix = "mspipe-stage-"

// BinaryName returns the file name of the external plugin for a stage name:
// "mspipe-stage-" followed by the name with "/" replaced by "-"
// ("acme/augment" → "mspipe-stage-acme-augment").
func BinaryName(name string) string {
	return BinaryPrefix + strings.ReplaceAll(name, "/", "-")
}
