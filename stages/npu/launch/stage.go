// Package launch provides the npu/launch built-in stage, which starts a user's own per-device command with the seeds' environment. Only its declaration exists so far: running it reports that the stage is not implemented in this build.
package launch

import _ "embed"

// Descriptor is the stage's declaration (name, JSON Schema of with, typed
// outputs) that mspipe validate checks specs against.
//
//go:embed stage.json
var Descriptor []byte
