// Package prepare provides the cifar/prepare built-in stage. Only its declaration exists so far: specs that use it validate, and running it reports that the stage is not implemented in this build (the NPU core issue adds it).
package prepare

import _ "embed"

// Descriptor is the stage's declaration (name, JSON Schema of with, typed
// outputs) that mspipe validate checks specs against.
//
//go:embed stage.json
var Descriptor []byte
