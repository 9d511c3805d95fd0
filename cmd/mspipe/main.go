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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
