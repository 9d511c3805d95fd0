// Package host is the mspipe side of stage plugins: it finds the executable
// a spec's `uses:` names, starts it as a plugin process, talks to it over
// the protocol of package plugins, and stops it. It is process hosting
// only: it knows neither specs nor the engine (package plugins/catalog
// puts it together for them). Only mspipe itself imports it; plugin
// authors and built-in stages import plugins and plugins/sdk, never this
// package.
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
//   - A sha256 pin ([LaunchConfig].SHA256) is checked before the binary
//     starts.
//   - A plugin that crashes, hangs or answers badly is an error naming the
//     plugin (and, for a crash, its exit status and panic message), never a
//     panic of the host.
package host
