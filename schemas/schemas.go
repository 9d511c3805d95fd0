// Package schemas provides the JSON Schema mspipe publishes for pipeline
// specs, for editors (yaml-language-server) and CI validators.
//
// pipeline.base.json is the hand-written part: the spec's own keys, with
// `with` typed as any object. Compose adds each built-in stage's `with`
// schema to it (an if/then on `uses`), which is what `mspipe schema`
// prints and what schemas/pipeline.schema.json holds; a test keeps that
// file equal to the command's output.
package schemas

import _ "embed"

// Base is the JSON Schema (2020-12) of a pipeline spec without the
// built-in stages' inputs.
//
//go:embed pipeline.base.json
var Base []byte
