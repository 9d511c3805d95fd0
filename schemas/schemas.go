// Package schemas provides the JSON Schemas mspipe publishes, embedded in the
// binary: pipeline.schema.json describes a pipeline spec for editors
// (yaml-language-server) and CI validators. `mspipe schema` prints it.
package schemas

import _ "embed"

// Pipeline is the JSON Schema (2020-12) of a pipeline spec file.
//
//go:embed pipeline.schema.json
var Pipeline []byte
