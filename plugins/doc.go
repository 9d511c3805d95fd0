// Package plugins is the stage plugin protocol of mspipe: what a stage is,
// and how the host and a plugin process talk about it. Both sides import
// it: plugin authors through plugins/sdk, built-in stages (stages/*) for
// [Stage], [Info] and the event and output types, and the host
// (plugins/host), which discovers, launches and stops plugin processes.
// It holds no host code: nothing here finds, starts or stops a process.
//
// # Overview
//
// A stage implements [Stage]: Describe (name, version, JSON Schema of its
// `with` block, declared outputs), Validate and Run, which streams [Event]s
// and returns outputs. The package provides
//
//   - the go-plugin handshake ([Handshake]) and plugin map ([PluginSet]),
//     shared by host and plugin;
//   - the gRPC adapters between [Stage] and plugins/proto/stage/v1: a
//     plugin's stage is served by [GRPCPlugin], and the host calls it through
//     the [RemoteStage] the plugin map dispenses;
//   - the JSON value codec of `with` blocks and outputs ([EncodeJSON],
//     [DecodeJSON]);
//   - the checks the host applies to what a plugin says ([CheckDescriptor],
//     [CheckOutputs], [ValidateName]);
//   - the plugin's side of the TLS setup ([ServerTLSConfig], [EnvTLS]);
//   - [Info], how a built-in stage registers with the host.
//
// A complete plugin is a ~20 line main with plugins/sdk:
//
//	func main() {
//		sdk.Serve(sdk.Stage[With]{Name: "acme/echo", Version: "1.0.0", Execute: run})
//	}
//
// # Invariants
//
//   - The host and a plugin talk gRPC over mutual TLS: the plugin accepts
//     only the host's client certificate and the host only the server
//     certificate it handed the plugin in [EnvTLS].
//   - JSON values (`with`, outputs, log fields) keep integers distinct from
//     floats: integers decode as int64, other numbers as float64, and a float
//     with an integral value is encoded with a decimal point ("2.0").
//   - The adapters only convert; a malformed message is an error wrapping
//     [ErrBadReply], never a panic.
//   - A breaking change to the protocol adds a new [ProtocolVersion]; a
//     plugin lists the versions it speaks in its [Descriptor].
package plugins
