package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/spec"
)

// validateTimeout bounds one Validate call of a stage.
const validateTimeout = 10 * time.Second

// clientIdle is how long a plugin process started to describe a stage for
// validation waits for another Validate call before it is stopped. A spec
// is validated in one pass, so the calls come close together; a run that
// follows starts its own processes.
const clientIdle = 10 * time.Second

// keptClient is a plugin process that a Catalog keeps for Validate calls:
// validation asks the process it started for Describe, not a new one.
type keptClient struct {
	client *host.Client
	cancel context.CancelFunc // ends the process's lifetime context
	idle   *time.Timer        // stops the process once unused for clientIdle
	busy   int                // Validate calls in progress; guarded by Catalog.mu
	broken bool               // the process failed a call: start another next time
}

func (k *keptClient) close() {
	k.idle.Stop()
	k.cancel()
	_ = k.client.Close()
}

// launchKeptLocked starts the plugin binary for uses and keeps it. ctx
// bounds the start only; the process lives until Close or clientIdle.
// The caller holds c.mu.
func (c *Catalog) launchKeptLocked(ctx context.Context, uses string, cfg host.LaunchConfig) (*keptClient, error) {
	client, cancel, err := launchKept(ctx, cfg)
	if err != nil {
		return nil, err
	}
	kc := &keptClient{client: client, cancel: cancel}
	kc.idle = time.AfterFunc(clientIdle, func() { c.dropIdle(uses, kc) })
	if old := c.clients[uses]; old != nil {
		go old.close()
	}
	c.clients[uses] = kc
	return kc, nil
}

// dropIdle stops kc if nothing used it since its timer was set.
func (c *Catalog) dropIdle(uses string, kc *keptClient) {
	c.mu.Lock()
	if kc.busy > 0 || c.clients[uses] != kc {
		c.mu.Unlock()
		return
	}
	delete(c.clients, uses)
	c.mu.Unlock()
	kc.close()
}

// Close stops the plugin processes the catalog keeps: for validation, and
// the idle ones of reusable stages (a process a stage still uses is
// stopped when the stage is done with it). The catalog stays usable for
// validation: a later Validate starts a process again; Launch then starts
// a process for each stage.
func (c *Catalog) Close() error {
	c.mu.Lock()
	kept := c.clients
	c.clients = map[string]*keptClient{}
	c.mu.Unlock()
	for _, kc := range kept {
		kc.close()
	}
	c.pool.close()
	return nil
}

// checker returns the spec.StageInfo.Check of a stage: a built-in's
// Validate runs in this process (as its Describe does), a plugin binary's
// in the process kept from its Describe.
func (c *Catalog) checker(uses string, res host.Resolved) func(context.Context, spec.CheckRequest) ([]spec.CheckProblem, error) {
	return func(ctx context.Context, req spec.CheckRequest) ([]spec.CheckProblem, error) {
		vreq := plugins.ValidateRequest{
			With:    req.With,
			Cluster: plugins.Cluster{Devices: req.Devices, RankTable: req.RankTable},
			Unknown: req.Unknown,
		}
		ctx, cancel := context.WithTimeout(ctx, validateTimeout)
		defer cancel()
		var problems []plugins.Problem
		var err error
		if res.Builtin {
			problems, err = c.validateBuiltin(ctx, res.Name, vreq)
		} else {
			problems, err = c.validateBinary(ctx, uses, res, vreq)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer to Validate within %v", validateTimeout)
		}
		if err != nil {
			return nil, err
		}
		out := make([]spec.CheckProblem, len(problems))
		for i, p := range problems {
			out[i] = spec.CheckProblem{Path: p.Path, Message: p.Message}
		}
		return out, nil
	}
}

func (c *Catalog) validateBuiltin(ctx context.Context, name string, req plugins.ValidateRequest) (problems []plugins.Problem, err error) {
	info, ok := c.registry.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("built-in stage %q is not registered", name)
	}
	// A built-in checks in mspipe's own process: its panic must not end it.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("stage panicked: %v", r)
		}
	}()
	return info.New().Validate(ctx, req)
}

func (c *Catalog) validateBinary(ctx context.Context, uses string, res host.Resolved, req plugins.ValidateRequest) ([]plugins.Problem, error) {
	kc, err := c.acquire(ctx, uses, res)
	if err != nil {
		return nil, err
	}
	problems, err := kc.client.Validate(ctx, req)
	c.release(uses, kc, err != nil)
	return problems, err
}

// acquire returns the kept process of uses, starting one when there is
// none (it stopped when idle, or failed), and marks it busy.
func (c *Catalog) acquire(ctx context.Context, uses string, res host.Resolved) (*keptClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kc := c.clients[uses]
	if kc == nil {
		cfg := res.LaunchConfig()
		cfg.SHA256 = c.pins[uses]
		var err error
		if kc, err = c.launchKeptLocked(ctx, uses, cfg); err != nil {
			return nil, err
		}
	}
	kc.busy++
	kc.idle.Stop()
	return kc, nil
}

// release ends a Validate call on kc; a failed call (the process may be
// gone or stuck) stops it.
func (c *Catalog) release(uses string, kc *keptClient, failed bool) {
	c.mu.Lock()
	kc.busy--
	if failed {
		kc.broken = true
		if c.clients[uses] == kc {
			delete(c.clients, uses)
		}
	}
	closeNow := kc.broken && kc.busy == 0
	if !kc.broken && kc.busy == 0 {
		kc.idle.Reset(clientIdle)
	}
	c.mu.Unlock()
	if closeNow {
		kc.close()
	}
}

// launchKept starts a plugin process that outlives ctx: ctx bounds only
// the start (a cancelled start ends the process), and the process then
// lives until the returned cancel is called.
func launchKept(ctx context.Context, cfg host.LaunchConfig) (*host.Client, context.CancelFunc, error) {
	life, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	client, err := host.Launch(life, cfg)
	if !stop() && err == nil {
		_ = client.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return client, cancel, nil
}
