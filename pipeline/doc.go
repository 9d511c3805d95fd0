// Package pipeline provides planning and execution of mspipe pipelines: the
// stage graph (needs, topological order, independent stages in parallel),
// the run directory and its run.json state machine, content-keyed caching,
// retries, timeouts, cancellation and resume.
//
// # Overview
//
// An Engine runs a validated spec.Pipeline. The files of this package
// follow that path: engine.go (Engine, Run, Resume, how a run ends),
// schedule.go (which stage starts when), stage.go (one stage: `if`, `with`,
// cache, attempts, timeout), cache.go (key, lookup, unchanged outputs),
// runner.go (state transitions and saving run.json), events.go (plugin
// events to the logs).
//
// Each stage is started through a
// Launcher (in mspipe: a go-plugin process per stage) and its events are
// written to the run's events.jsonl and the stage's log:
//
//	runs/<run-id>/
//	  run.json          state of the run and of every stage (atomic writes)
//	  .run.json.reserve 1 MiB kept free for run.json while the run runs
//	  pipeline.yaml     the spec as it was run
//	  events.jsonl      one JSON object per event (zerolog)
//	  stages/<id>/      the stage's working directory
//	    stage.log       plugin output and log events, rotated to stage.log.1
//	                    at MaxStageLogSize
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
// is not run again. Files are hashed through a digest cache keyed by their
// stat (digests.go), so an unchanged multi-GB output is not read again.
//
// # Errors
//
// A stage that fails gives a *StageError (stage, attempt, cause) that
// errors.As finds in the error Run returns, beside ErrStageFailed; its
// cause's text is the stage's reason in run.json. A stage that runs past
// its timeout fails with ErrTimeout, "timed out after <timeout>", however
// the plugin's connection ended at the deadline: the deadline is compared
// with the engine's clock, since the plugin side may reset the stream
// before the host's context timer fires.
//
// # Saving state
//
// run.json is written (atomically) at every transition. When a write fails
// the run cannot be trusted for resume or caching any more: no new stage
// starts, running stages finish, the run ends failed and Run returns the
// save error (a later write is still tried, so the file keeps up when the
// disk recovers). A full disk is the common cause, so a run holds a reserve
// file beside run.json and deletes it when a write finds no space: the run
// still records how it ended. A run that cannot write the reserve, or its
// first run.json, does not start and leaves no directory behind.
//
// # Resume
//
// Resume runs again the stages that did not end succeeded, cached or
// skipped, and a succeeded or cached stage whose path outputs are gone or
// no longer have the content hash recorded in run.json (with a line saying
// why), with every stage that depends on them.
//
// # Logging
//
// Engine.Log receives one zerolog event per transition and plugin log
// record: its message is the console line a person reads, its fields
// (event, run, stage, status, reason…) what a machine reads. The caller
// picks the format; events.jsonl in the run directory is written apart
// from it, always as JSON.
package pipeline
