package plugins

import (
	"context"
	"fmt"
	"syscall"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	stagev1 "github.com/mspipe/mspipe/plugins/proto/stage/v1"
)

// ProtocolVersion is the version of the stage protocol this package speaks
// (plugins/proto/stage/v1). A breaking change to the protocol adds a new
// version, negotiated through go-plugin's VersionedPlugins.
const ProtocolVersion = 1

// PluginName is the key of the stage plugin in the go-plugin plugin map.
const PluginName = "stage"

// The magic cookie tells a plugin binary that mspipe started it. It is not
// a secret.
const (
	MagicCookieKey   = "MSPIPE_PLUGIN"
	MagicCookieValue = "stage-d3f1a8c2b6e04975"
)

// ParentDeathSignal is what a plugin process receives, on Linux, when
// mspipe dies (the parent-death signal the host sets): a plugin built with
// plugins/sdk catches it to kill everything it started, and any Go program
// that does not exits on it.
const ParentDeathSignal = syscall.SIGHUP

// Handshake returns the go-plugin handshake shared by the host and every
// stage plugin.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}

// PluginSet returns the go-plugin plugin map. A plugin passes its stage
// implementation; the host passes nil.
func PluginSet(impl Stage) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl}}
}

// GRPCPlugin is the go-plugin glue for [Stage] over gRPC.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Stage // set on the plugin side only
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the stage implementation with the plugin's gRPC server.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("stage plugin served without an implementation")
	}
	stagev1.RegisterStageServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a [*RemoteStage] that calls the plugin over conn. ctx
// is cancelled by go-plugin when the plugin process exits.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &RemoteStage{client: stagev1.NewStageClient(conn), exited: ctx.Done()}, nil
}
