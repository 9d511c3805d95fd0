package optim

import "errors"

// ErrConfig reports an optimizer or learning-rate schedule that cannot be built.
var ErrConfig = errors.New("invalid optimizer configuration")
