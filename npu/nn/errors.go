package nn

import "errors"

// ErrConfig reports a layer or model configuration that cannot be built.
var ErrConfig = errors.New("invalid configuration")

// ErrNoForward reports a Backward call with no matching Forward before it.
var ErrNoForward = errors.New("backward without a forward pass")

// ErrLabel reports a class label outside [0, classes).
var ErrLabel = errors.New("label out of range")
