// Package pipeline provides planning and execution of mspipe pipelines: the
// stage graph (needs, topological order, independent stages in parallel),
// the run directory and its run.json state machine, content-keyed caching,
// retries, timeouts, cancellation and resume.
//
// # Overview
//
// An Engine runs a validated spec.Pipeline. Each stage is started through a
// Launcher (in mspipe: a go-plugin process per stage) and its events are
// written to the run's events.jsonl and the stage's log:
//
//	runs/<run-id>/
//	  run.json          state of the run and of every stage (atomic writes)
//	  pipeline.yaml     the spec as it was run
//	  events.jsonl      one JSON object per event (zerolog)
//	  stages/<id>/      the stage's working directory
//	    stage.log       plugin output and log events
//
// # States
//
// A stage is pending until its needs are done, then running, and ends
// succeeded, failed, cancelled (interrupted), skipped (its `if` was false or
// a stage it needs was skipped) or cached (an earlier run produced the same
// outputs from the same inputs). Resume re-runs the stages that did not end
// succeeded, cached or skipped, and every stage that depends on them.
//
// # Inputs
//
// Validation knows a `${{ }}` value in `with` only by its type. When a stage
// is about to run, its resolved `with` (the values the plugin will receive)
// is checked against the JSON Schema its plugin declares, compiled once per
// plugin identity; a value that does not fit fails the stage before its
// plugin starts, with the place in the spec. This holds for every plugin,
// whatever it is built with.
//
// # Caching
//
// A stage's cache key is the SHA-256 of its plugin identity (name, version,
// binary digest), its resolved inputs, its cluster, its environment and the
// content hashes of the path outputs of the stages it reads. A stage with
// the same key that succeeded in an earlier run whose artifacts are unchanged
// is not run again.
package pipeline
