// Package catalog says what a spec can use: the built-in stages, the
// declared-only built-ins and the plugin binaries found along the search
// path, each described (what its `with:` takes and what it outputs),
// validated (the stage's own check) and launched for the engine. It puts
// package plugins/host (discovery and process hosting) together for the
// two packages that need stages without knowing any: a [Catalog] is the
// spec.Catalog that validation asks what a stage declares, and the
// pipeline.Launcher that starts a stage's plugin during a run.
//
// The simplest use:
//
//	c, err := catalog.New(catalog.Config{Resolver: &host.Resolver{Builtins: reg, SpecDir: dir}})
//	defer c.Close()
//	info, err := c.Stage("npu/train") // what validation needs
//	proc, err := c.Launch(ctx, p, p.Stages[0], log)
//
// # Invariants
//
//   - What a stage declares is asked once per Catalog and kept.
//   - [Catalog.Stage] starts a plugin binary to read its declaration only
//     as the catalog's [ExecPolicy] allows (validation of a spec that may
//     bring its own binaries); otherwise it answers spec.ErrUnchecked. A
//     sha256 pin the spec sets is checked before the binary starts.
//   - The stage's own check (spec.StageInfo.Check, the plugin's Validate)
//     runs in mspipe for a built-in, as its Describe does, and for a
//     binary in the process Catalog.Stage started, which the catalog keeps
//     until [Catalog.Close] or until it has been idle for a few seconds;
//     each call has a timeout.
//   - A declared-only built-in validates but fails with [ErrNotImplemented]
//     when run.
package catalog
