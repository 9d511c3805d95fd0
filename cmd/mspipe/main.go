// Command mspipe runs declarative pipelines for distributed training jobs on
// (simulated) Ascend devices: prepare data, train, integrate and reshard
// checkpoints, retrain. See README.md and `mspipe --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/mspipe/mspipe/cmd/mspipe/internal/cli"
	"github.com/mspipe/mspipe/pipeline"
)

func main() {
	// The first interrupt cancels the run: running stages stop, and the
	// stages whose if reads always() or cancelled() still run. The second
	// stops those too; a third gets the default action.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	force, forceStop := context.WithCancel(context.Background())
	go func() {
		<-sig
		cancel()
		<-sig
		forceStop()
		signal.Stop(sig)
	}()
	code := cli.Main(pipeline.WithForceStop(ctx, force), os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sig)
	cancel()
	forceStop()
	os.Exit(code)
}
