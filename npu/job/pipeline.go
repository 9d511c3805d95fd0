package job

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/shard"
)

// Pipelined reports whether the job cuts its network into pipeline
// stages.
func (c Config) Pipelined() bool { return c.PipelineStages > 1 }

// PortBlocks is how many ports each rank of a job with the given number
// of pipeline stages listens on: its port in the job's communicator
// (BasePort+rank), and with stages also in its stage group's
// (BasePort+devices+rank) and in its two neighbour links' (BasePort+2·
// devices+rank and BasePort+3·devices+rank: the link between stages s and
// s+1 uses block 2 + s mod 2, so a rank's two links never share one). Each
// port is BasePort + block·devices + rank for one (block, rank), so no two
// communicators of the job collide.
func PortBlocks(stages int) int {
	if stages > 1 {
		return 4
	}
	return 1
}

// Port blocks of a pipeline rank's sub-communicators (see PortBlocks).
const stageBlock = 1

// linkBlock is the port block of the link between stages s and s+1.
func linkBlock(s int) int { return 2 + s%2 }

// pipeComms are a pipeline rank's communicators besides the job's.
type pipeComms struct {
	stage, prev, next *collective.Comm // prev, next: nil at the ends
	job               *collective.Comm // the job's, closed by its owner
	spec              shard.Pipeline
	devices, rank     int // in the stage group
	done, watched     chan struct{}
}

// joinPipeline connects rank (of size) to its stage group and to its
// neighbours, over sub-communicators of the job's configuration cc (with
// its transport: shared memory between the ranks of a server carries the
// stage groups' Exchange and GroupAllReduce and the links' SendRecv), and
// watches them all with job: when one fails, the
// others are aborted with its error, so a rank waiting on its stage group
// or a link fails at once when any rank of the job dies (the job's
// communicator connects every pair of ranks and sees it).
func joinPipeline(ctx context.Context, cfg Config, cc collective.Config, job *collective.Comm, rank, size int) (*pipeComms, error) {
	k := cfg.PipelineStages
	per := size / k
	s, i := rank/per, rank%per
	sched, err := shard.ParseSchedule(cfg.PipelineSchedule)
	if err != nil {
		return nil, err
	}
	p := &pipeComms{job: job, devices: per, rank: i, done: make(chan struct{}), watched: make(chan struct{}),
		spec: shard.Pipeline{Stages: k, Stage: s, Micro: max(cfg.MicroSize, 1), Schedule: sched, Assign: cfg.PipelineStage}}
	join := func(what string, members []int, block int) (*collective.Comm, error) {
		sub, err := cc.Sub(members, block*size)
		if err != nil {
			return nil, err
		}
		c, err := collective.Init(ctx, sub)
		if err != nil {
			return nil, fmt.Errorf("%s (ranks %v): %w", what, members, err)
		}
		return c, nil
	}
	group := make([]int, per)
	for j := range group {
		group[j] = s*per + j
	}
	if p.stage, err = join(fmt.Sprintf("stage %d group", s), group, stageBlock); err != nil {
		return nil, err
	}
	// Each link is set up by its two ends in stage order, so the chain
	// connects from the last stage down.
	if s < k-1 {
		if p.next, err = join(fmt.Sprintf("link to stage %d", s+1), []int{rank, rank + per}, linkBlock(s)); err != nil {
			p.close()
			return nil, err
		}
		p.spec.Next = p.next
	}
	if s > 0 {
		if p.prev, err = join(fmt.Sprintf("link to stage %d", s-1), []int{rank - per, rank}, linkBlock(s-1)); err != nil {
			p.close()
			return nil, err
		}
		p.spec.Prev = p.prev
	}
	go p.watch(job)
	return p, nil
}

// watch aborts every communicator of the rank when one fails (not when
// one is closed), until Close.
func (p *pipeComms) watch(job *collective.Comm) {
	defer close(p.watched)
	comms := []*collective.Comm{job, p.stage}
	for _, c := range []*collective.Comm{p.prev, p.next} {
		if c != nil {
			comms = append(comms, c)
		}
	}
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.done)}}
	for _, c := range comms {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.Broken())})
	}
	chosen, _, _ := reflect.Select(cases)
	if chosen == 0 {
		return
	}
	cause := comms[chosen-1].Err()
	if cause == nil || errors.Is(cause, collective.ErrClosed) {
		return
	}
	for j, c := range comms {
		if j != chosen-1 {
			c.Abort(cause)
		}
	}
}

// close stops the watch and closes the stage group and the links. A
// failure on one of them is first passed on to the others (the watch
// may not have done it yet), so that peers hear the cause, not a
// goodbye.
func (p *pipeComms) close() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	comms := []*collective.Comm{p.job, p.stage, p.prev, p.next}
	for _, c := range comms {
		if c == nil {
			continue
		}
		if err := c.Err(); err != nil && !errors.Is(err, collective.ErrClosed) {
			for _, o := range comms {
				if o != nil && o != c {
					o.Abort(err)
				}
			}
			break
		}
	}
	for _, c := range []*collective.Comm{p.stage, p.prev, p.next} {
		if c != nil {
			c.Close()
		}
	}
}

// Close stops watching and closes the communicators joinPipeline opened.
func (p *pipeComms) Close() {
	p.close()
	<-p.watched
}
