// Package host is the mspipe side of stage plugins: it finds the executable
// a spec's `uses:` names, starts it as a plugin process, talks to it over
// the protocol of package plugins, and stops it. Only mspipe itself (the
// CLI and its tests) imports it; plugin authors and built-in stages import
// plugins and plugins/sdk, never this package.
//
// # Overview
//
//   - [Registry] holds the built-in stages the mspipe binary serves
//     (`mspipe __stage NAME`, see [ServeCommand]).
//   - [Resolver] turns `uses:` into an executable: a built-in, a binary
//     mspipe-stage-<name> along the search path ([DefaultSearchPath]), or a
//     path relative to the spec.
//   - [Launch] starts the plugin in its own process group, with mutual TLS
//     credentials made for that launch, and returns a [Client], itself a
//     plugins.Stage whose replies are checked against the descriptor.
//   - [PluginSource] finds the Go source of a plugin that is not built yet
//     (plugins/NAME or examples/plugins/NAME next to the spec), so that
//     validation can say which `go build` to run ([BuildCommand]).
//   - [Catalog] puts these together for the engine: it is the spec.Catalog
//     that validation asks what a stage declares, and the
//     pipeline.Launcher that starts a stage's plugin during a run.
//
// The simplest use:
//
//	res, err := resolver.Resolve("npu/train")
//	cfg := res.LaunchConfig()
//	cfg.Log = stageLog
//	c, err := host.Launch(ctx, cfg)
//	defer c.Close()
//	outputs, err := c.Run(ctx, req, func(e plugins.Event) { ... })
//
// # Invariants
//
//   - Every plugin runs in its own process and process group;
//     [Client.Close] (or the end of the context given to [Launch]) sends
//     SIGTERM to the whole group, waits a grace period, then sends SIGKILL
//     to whatever of the group is left (internal/procgroup). On Linux the
//     plugin's parent-death signal is SIGHUP: a plugin built with
//     plugins/sdk is a child subreaper and kills everything below it when
//     mspipe dies, even processes that left their group; one that is not
//     exits on it. On Windows, which has no process groups, Launch fails
//     with a clear error.
//   - The host's client certificate is made once per process, each
//     plugin's server certificate at its launch; a plugin trusts only the
//     host's, the host only that plugin's.
//   - [Catalog.Stage] starts a plugin binary to read its declaration only
//     as the catalog's [ExecPolicy] allows (validation of a spec that may
//     bring its own binaries); otherwise it answers spec.ErrUnchecked.
//     A sha256 pin is checked before the binary starts.
//   - The stage's own check (spec.StageInfo.Check, the plugin's Validate)
//     runs in mspipe for a built-in, as its Describe does, and for a
//     binary in the process Catalog.Stage started, which the catalog keeps
//     until [Catalog.Close] or until it has been idle for a few seconds;
//     each call has a timeout.
//   - A plugin that crashes, hangs or answers badly is an error naming the
//     plugin (and, for a crash, its exit status and panic message), never a
//     panic of the host.
package host
