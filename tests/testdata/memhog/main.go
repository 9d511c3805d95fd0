// Command memhog is a stage plugin for the memory-limit tests: it
// allocates and touches `mib` MiB of heap, keeps it while it reports the
// memory limit it runs under, and returns how much it held.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

type with struct {
	MiB int `json:"mib" jsonschema:"minimum=1" description:"MiB of heap to allocate and touch"`
}

func main() {
	sdk.Serve(sdk.Stage[with]{
		Name:        "test/memhog",
		Version:     "0.1.0",
		Description: "Allocates as much memory as it is told, for the memory-limit tests.",
		Outputs: []plugins.OutputSpec{
			{Name: "held_mib", Type: plugins.TypeInt, Description: "MiB allocated and touched"},
			{Name: "rlimit_data", Type: plugins.TypeInt, Description: "the process's RLIMIT_DATA (bytes; -1: none)"},
			{Name: "gomemlimit", Type: plugins.TypeString, Description: "its GOMEMLIMIT variable"},
		},
		Execute: run,
	})
}

func run(_ context.Context, sc sdk.Context, w with) (map[string]any, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &lim); err != nil {
		return nil, err
	}
	limit := int64(-1)
	if lim.Cur != unix.RLIM_INFINITY {
		limit = int64(lim.Cur)
	}
	sc.Info(fmt.Sprintf("allocating %d MiB under RLIMIT_DATA %d", w.MiB, limit))
	held := make([][]byte, 0, w.MiB)
	for range w.MiB {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page
		}
		held = append(held, b)
	}
	runtime.KeepAlive(held)
	return map[string]any{"held_mib": len(held), "rlimit_data": limit, "gomemlimit": os.Getenv("GOMEMLIMIT")}, nil
}
