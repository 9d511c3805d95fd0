package shard

import (
	"fmt"
)

// Schedule orders a pipeline stage's forward and backward passes over the
// micro-batches of a step.
type Schedule uint8

const (
	// OneFOneB runs K−1−s warm-up forwards on stage s of K, then
	// alternates one forward and one backward, then the remaining
	// backwards (PipeDream-flush, MindSpore's default): at most K−s
	// micro-batches are in flight on stage s.
	OneFOneB Schedule = iota
	// GPipe runs every forward, then every backward.
	GPipe
)

func (s Schedule) String() string {
	switch s {
	case OneFOneB:
		return "1f1b"
	case GPipe:
		return "gpipe"
	}
	return fmt.Sprintf("schedule(%d)", uint8(s))
}

// ParseSchedule returns the schedule named "1f1b" or "gpipe" ("" is 1f1b).
func ParseSchedule(name string) (Schedule, error) {
	switch name {
	case "", "1f1b":
		return OneFOneB, nil
	case "gpipe":
		return GPipe, nil
	}
	return 0, fmt.Errorf("%w: pipeline schedule %q, want 1f1b or gpipe", ErrConfig, name)
}

// stepKind is what one step of a stage's program does.
type stepKind uint8

const (
	stepForward  stepKind = iota // run the stage forward on a micro-batch
	stepBackward                 // run it backward
	// stepPrev and stepNext are one exchange with the previous or the next
	// stage's rank of the same local index: on the previous link this
	// rank sends gradients and receives activations, on the next it sends
	// activations and receives gradients.
	stepPrev
	stepNext
)

// step is one step of a stage's program: a pass over micro-batch micro,
// or a link exchange sending micro-batch send's tensor and receiving
// micro-batch recv's (-1: nothing that way).
type step struct {
	kind       stepKind
	micro      int
	send, recv int
}

// program returns the steps of stage s of k over m micro-batches. Both
// ends of every link make the same sequence of exchanges (the activation
// one sends is the one the other receives, and the reverse), so each
// exchange is one blocking call on both sides; TestSchedulesMatch checks
// that and that no schedule deadlocks. Backward passes run in micro-batch
// order in both schedules, so gradients accumulate in the same order.
func program(sched Schedule, s, k, m int) []step {
	var out []step
	first, last := s == 0, s == k-1
	prev := func(send, recv int) {
		if !first {
			out = append(out, step{kind: stepPrev, send: send, recv: recv})
		}
	}
	next := func(send, recv int) {
		if !last {
			out = append(out, step{kind: stepNext, send: send, recv: recv})
		}
	}
	fwd := func(i int) { out = append(out, step{kind: stepForward, micro: i}) }
	bwd := func(i int) { out = append(out, step{kind: stepBackward, micro: i}) }
	if sched == GPipe {
		for i := range m {
			prev(-1, i)
			fwd(i)
			next(i, -1)
		}
		for i := range m {
			next(-1, i)
			bwd(i)
			prev(i, -1)
		}
		return out
	}
	warm := min(k-1-s, m)
	steady := m - warm
	for i := range warm {
		prev(-1, i)
		fwd(i)
		next(i, -1)
	}
	if steady > 0 {
		prev(-1, warm)
	}
	for i := range steady {
		fwd(warm + i)
		// Send this forward's output and receive the gradient of the
		// oldest micro-batch in flight, in one exchange.
		next(warm+i, i)
		bwd(i)
		if i == steady-1 {
			prev(i, -1)
		} else {
			prev(i, warm+i+1)
		}
	}
	for i := steady; i < m; i++ {
		next(-1, i)
		bwd(i)
		prev(i, -1)
	}
	return out
}

// inFlight is the most micro-batches whose forward has run and whose
// backward has not, at any point of a program: the activations a stage
// would keep without recomputation.
func inFlight(prog []step) int {
	most, cur := 0, 0
	for _, st := range prog {
		switch st.kind {
		case stepForward:
			cur++
			most = max(most, cur)
		case stepBackward:
			cur--
		}
	}
	return most
}
