// Package reshard provides the ckpt/reshard built-in stage. Only its declaration exists so far: running it reports that the stage is not implemented in this build (the checkpoint integrate/reshard issue adds it).
package reshard

import _ "embed"

// Descriptor is the stage's declaration (name, JSON Schema of with, typed
// outputs) that mspipe validate checks specs against.
//
//go:embed stage.json
var Descriptor []byte
