// Command testplugin is a stage plugin for the tests of package host. Its
// `mode` decides how it behaves: ok, empty, wait, panic, crash, exit, hang,
// big (an output of 100 MiB after a log line that is not UTF-8);
// check makes its CheckCluster report what it was given.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

type with struct {
	Mode string `json:"mode" jsonschema:"enum=ok|empty|wait|panic|crash|exit|hang|check|big"`
	Name string `json:"name,omitempty" jsonschema:"default=world"`
}

func main() {
	if os.Getenv("TESTPLUGIN_CHILD") == "1" {
		// The child of mode hang: ignores SIGTERM and sleeps.
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(time.Hour)
		return
	}
	if marker := os.Getenv("TESTPLUGIN_MARKER"); marker != "" {
		_ = os.WriteFile(marker, []byte("started\n"), 0o644)
	}
	stage := sdk.Stage[with]{
		Name:        "test/plugin",
		Version:     "0.1.0",
		Description: "Behaves as its mode says, for tests.",
		Outputs: []plugins.OutputSpec{
			{Name: "greeting", Type: plugins.TypeString},
			{Name: "count", Type: plugins.TypeInt},
			{Name: "ratio", Type: plugins.TypeFloat},
			{Name: plugins.WildcardOutput, Type: plugins.TypeAny},
		},
		CheckCluster: checkCluster,
		Execute:      run,
	}
	if os.Getenv("TESTPLUGIN_AUTOMTLS") == "1" {
		// Serve as plugins built with an SDK that relied on go-plugin's
		// AutoMTLS did: no TLS provider.
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: plugins.Handshake(),
			Plugins:         plugins.PluginSet(stage),
			GRPCServer:      plugin.DefaultGRPCServer,
		})
		return
	}
	sdk.Serve(stage)
}

// checkCluster reports, in mode check, the request it got and the pid of
// the process that answers, at /mode and at /name (dropped by the SDK when
// name is unknown).
func checkCluster(w with, c plugins.Cluster, unknown []string) []plugins.Problem {
	if w.Mode != "check" {
		return nil
	}
	msg := fmt.Sprintf("pid %d, devices %d, rank table %q, unknown %v", os.Getpid(), c.Devices, c.RankTable, unknown)
	return []plugins.Problem{{Path: "/mode", Message: msg}, {Path: "/name", Message: "name " + w.Name}}
}

func run(ctx context.Context, sc sdk.Context, w with) (map[string]any, error) {
	out := map[string]any{"greeting": "hello " + w.Name, "count": 3, "ratio": 2.0}
	switch w.Mode {
	case "empty":
		return map[string]any{"greeting": "", "count": 0, "ratio": 0.0}, nil
	case "ok":
		fmt.Println("plain stdout line") // goes to the stage log
		sc.Info("starting", "name", w.Name, "pid", os.Getpid())
		sc.Progress(1, 2, "step", "half")
		sc.Metric("loss", 0.5, 7)
		path := filepath.Join(sc.WorkDir(), "result.txt")
		if err := os.WriteFile(path, []byte("result\n"), 0o644); err != nil {
			return nil, err
		}
		if err := sc.Artifact("result", "result.txt"); err != nil {
			return nil, err
		}
		out["file"] = "result.txt"
		return out, nil
	case "wait":
		sc.Info("waiting")
		<-ctx.Done()
		_ = os.WriteFile(filepath.Join(sc.WorkDir(), "cancelled"), []byte(ctx.Err().Error()), 0o644)
		return nil, ctx.Err()
	case "big":
		sc.Info("bytes \xff\xfe that are not UTF-8")
		out["blob"] = strings.Repeat("x", 100<<20)
		return out, nil
	case "panic":
		panic("boom in run")
	case "crash":
		go func() { panic("boom in goroutine") }()
		time.Sleep(time.Minute)
	case "exit":
		sc.Info("exiting")
		os.Exit(3)
	case "hang":
		signal.Ignore(syscall.SIGTERM)
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		child := exec.Command(self)
		child.Env = append(os.Environ(), "TESTPLUGIN_CHILD=1")
		if err := child.Start(); err != nil {
			return nil, err
		}
		pids := fmt.Sprintf("%d %d\n", os.Getpid(), child.Process.Pid)
		if err := os.WriteFile(filepath.Join(sc.WorkDir(), "pids"), []byte(pids), 0o644); err != nil {
			return nil, err
		}
		sc.Info("ready")
		select {} // ignores ctx on purpose
	}
	return nil, fmt.Errorf("unknown mode %q", w.Mode)
}
