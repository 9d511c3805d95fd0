package catalog

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
)

// poolIdle is how long a plugin process that finished a run waits for the
// next stage of its kind before it is stopped. Stages of a chain follow
// each other within milliseconds; a process is not kept across a long
// stage of another kind.
const poolIdle = 5 * time.Second

// pool keeps the plugin processes of reusable built-in stages
// (plugins.Info.Reusable) between runs: a stage takes an idle process of
// its kind, or starts one, and gives it back when its run ended cleanly.
// A process is used by one stage at a time. Whatever a run left behind in
// it is killed by the plugin before the run's reply (plugins/sdk), so the
// next stage starts from the same state as in a new process. A process
// whose run failed, was cancelled or timed out, or whose connection broke,
// is stopped, never reused. Idle processes stop after poolIdle, at Close,
// and, like every plugin process, when mspipe dies (parent-death signal).
type pool struct {
	mu     sync.Mutex
	idle   map[string][]*pooled // by poolKey
	closed bool
}

// pooled is one plugin process of the pool.
type pooled struct {
	key    string
	client *host.Client
	cancel context.CancelFunc // ends the process's lifetime context
	log    *switchWriter      // the current stage's log
	timer  *time.Timer        // stops the process when idle for poolIdle
}

// poolKey names the processes that can serve a launch: same executable,
// arguments, pin and memory limit (set when the process starts).
func poolKey(cfg host.LaunchConfig) string {
	return strings.Join(append([]string{cfg.Path, cfg.SHA256, strconv.FormatInt(cfg.MemoryLimit, 10), cfg.Dir,
		strings.Join(cfg.Env, "\x00")}, cfg.Args...), "\x00")
}

// lease returns a process for cfg, idle or new, whose stage log is log
// until the lease ends. ctx is the stage's: when it is done, the process
// is stopped, as a process launched for the stage alone would be.
func (p *pool) lease(ctx context.Context, cfg host.LaunchConfig, log io.Writer) (*lease, error) {
	key := poolKey(cfg)
	for {
		pc := p.takeIdle(key)
		if pc == nil {
			break
		}
		select {
		case <-pc.client.Exited(): // died while idle
			pc.stop()
			continue
		default:
		}
		pc.log.set(log)
		return newLease(ctx, p, pc), nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sw := &switchWriter{w: log}
	cfg.Log = sw
	// The start is bounded by the stage's context as a plain launch is; the
	// process then lives until the pool ends it.
	client, cancel, err := launchKept(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newLease(ctx, p, &pooled{key: key, client: client, cancel: cancel, log: sw}), nil
}

// takeIdle removes and returns an idle process of key, or nil.
func (p *pool) takeIdle(key string) *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	for list := p.idle[key]; len(list) > 0; list = p.idle[key] {
		pc := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		if pc.timer.Stop() {
			return pc
		}
		// Its idle time is up and expire, no longer finding it, will not
		// stop it: stop it here.
		go pc.stop()
	}
	return nil
}

// giveBack makes pc idle, or stops it when the pool is closed. Its log
// stays the last stage's until the next lease: a line the plugin printed
// during the run may arrive after the reply (stdout and stderr stream
// apart from it), and lands there while that log is open.
func (p *pool) giveBack(pc *pooled) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.stop()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*pooled{}
	}
	p.idle[pc.key] = append(p.idle[pc.key], pc)
	if pc.timer == nil {
		pc.timer = time.AfterFunc(poolIdle, func() { p.expire(pc) })
	} else {
		pc.timer.Reset(poolIdle)
	}
	p.mu.Unlock()
}

// expire stops pc if it is still idle.
func (p *pool) expire(pc *pooled) {
	p.mu.Lock()
	list := p.idle[pc.key]
	for i, x := range list {
		if x == pc {
			p.idle[pc.key] = append(list[:i:i], list[i+1:]...)
			p.mu.Unlock()
			pc.stop()
			return
		}
	}
	p.mu.Unlock()
}

// close stops every idle process; processes leased now are stopped when
// their lease ends.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, list := range idle {
		for _, pc := range list {
			pc.timer.Stop()
			wg.Add(1)
			go func() { defer wg.Done(); pc.stop() }()
		}
	}
	wg.Wait()
}

func (pc *pooled) stop() {
	pc.cancel()
	_ = pc.client.Close()
}

// lease is one stage's use of a pooled process: a pipeline.Process whose
// Close gives the process back when every Run succeeded.
type lease struct {
	pool    *pool
	pc      *pooled
	unwatch func() bool // ends the watch of the stage's context
	mu      sync.Mutex
	broken  bool // a Run failed or the stage's context ended: stop, do not reuse
	done    bool
}

func newLease(ctx context.Context, p *pool, pc *pooled) *lease {
	l := &lease{pool: p, pc: pc}
	// As with a process of its own: the stage's context ending stops it.
	l.unwatch = context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.broken = true
		l.mu.Unlock()
		_ = pc.client.Close()
	})
	return l
}

// Run runs the stage in the leased process; see host.Client.Run.
func (l *lease) Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error) {
	out, err := l.pc.client.Run(ctx, req, emit)
	if err != nil || ctx.Err() != nil {
		l.mu.Lock()
		l.broken = true
		l.mu.Unlock()
	}
	return out, err
}

// Close ends the lease: the process goes back to the pool after clean
// runs, and is stopped otherwise. Close may be called more than once.
func (l *lease) Close() error {
	watching := l.unwatch()
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return nil
	}
	l.done = true
	broken := l.broken || !watching
	l.mu.Unlock()
	if !broken {
		select {
		case <-l.pc.client.Exited():
			broken = true
		default:
		}
	}
	if broken {
		// Its log stays the stage's until it has exited: a crash's last
		// words are this stage's.
		l.pc.cancel()
		return l.pc.client.Close()
	}
	l.pool.giveBack(l.pc)
	return nil
}

// switchWriter is a pooled process's log: the stage log of the stage
// using it or that used it last. A reusable stage reports through events,
// not its stdout (plugins.Info.Reusable).
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}
