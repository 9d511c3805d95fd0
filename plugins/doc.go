// Package plugins provides the stage plugin protocol of mspipe: the Go
// interface every stage implements, the go-plugin handshake and plugin map,
// the gRPC adapters between that interface and the wire protocol
// (plugins/proto/stage/v1), the registry of built-in stages, discovery of
// plugin binaries, and the host side that launches a plugin process and
// talks to it.
//
// # Overview
//
// A stage is anything that implements [Stage]. Plugin authors do not use this
// package directly; they write a ~20 line main with plugins/sdk. The host
// resolves a spec's `uses:` with a [Resolver], starts the plugin with
// [Launch] and uses the returned [Client], which is itself a [Stage]:
//
//	res, err := resolver.Resolve("npu/train")
//	cfg := res.LaunchConfig()
//	cfg.Log = stageLog
//	c, err := plugins.Launch(ctx, cfg)
//	defer c.Close()
//	outputs, err := c.Run(ctx, req, func(e plugins.Event) { ... })
//
// # Invariants
//
//   - Every plugin runs in its own process and process group; [Client.Close]
//     (or the end of the context given to [Launch]) sends SIGTERM to the whole
//     group, waits a grace period, then sends SIGKILL to whatever of the group
//     is left.
//   - The host and a plugin talk gRPC over mutual TLS: the plugin accepts
//     only the host's client certificate and the host only the server
//     certificate it handed the plugin. The client's is made once per host
//     process, the server's at each launch; they reach the plugin in
//     [EnvTLS].
//   - JSON values (`with`, outputs, log fields) keep integers distinct from
//     floats: integers decode as int64, other numbers as float64, and a float
//     with an integral value is encoded with a decimal point ("2.0").
//   - A malformed reply from a plugin is an error naming the plugin, never a
//     panic of the host; outputs are checked against the declared
//     [OutputSpec] types.
package plugins
