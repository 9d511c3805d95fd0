// Command specdoc writes docs/spec-reference.md, the reference of pipeline
// specs: every key of schemas/pipeline.schema.json, then each built-in
// stage's `with` inputs and outputs as the stage declares them (its
// Describe). Run it from the module root after changing either:
//
//	go run ./tools/specdoc            # rewrite docs/spec-reference.md
//	go run ./tools/specdoc -o -       # print it
//
// The reference is generated, never edited by hand: a test fails when the
// committed file differs from what this command writes.
package main
