package shard

import (
	"fmt"
	"testing"
)

// TestSchedulesMatch checks every program for up to 8 stages and 16
// micro-batches: each stage runs every forward and every backward once,
// backwards in micro-batch order, never a backward before its forward;
// the two ends of every link make mirrored exchange sequences; and the
// stages, run with blocking exchanges, all finish (no deadlock).
func TestSchedulesMatch(t *testing.T) {
	for _, sched := range []Schedule{OneFOneB, GPipe} {
		for k := 1; k <= 8; k++ {
			for m := 1; m <= 16; m++ {
				if err := checkPrograms(sched, k, m); err != nil {
					t.Errorf("%v, %d stages, %d micro-batches: %v", sched, k, m, err)
				}
			}
		}
	}
}

func checkPrograms(sched Schedule, k, m int) error {
	progs := make([][]step, k)
	for s := range k {
		progs[s] = program(sched, s, k, m)
		done := make([]int, m) // 1: forward ran, 2: backward ran
		nextB := 0
		for _, st := range progs[s] {
			switch st.kind {
			case stepForward:
				if done[st.micro] != 0 {
					return fmt.Errorf("stage %d: forward of micro-batch %d twice", s, st.micro)
				}
				done[st.micro] = 1
			case stepBackward:
				if done[st.micro] != 1 || st.micro != nextB {
					return fmt.Errorf("stage %d: backward of micro-batch %d out of order", s, st.micro)
				}
				done[st.micro] = 2
				nextB++
			}
		}
		if nextB != m {
			return fmt.Errorf("stage %d: %d backwards, want %d", s, nextB, m)
		}
	}
	// Run the programs with blocking exchanges: a link step completes only
	// when both ends reach theirs, and they must mirror each other.
	pc := make([]int, k)
	for {
		moved, finished := false, true
		for s := range k {
			for pc[s] < len(progs[s]) {
				st := progs[s][pc[s]]
				if st.kind == stepForward || st.kind == stepBackward {
					pc[s]++
					moved = true
					continue
				}
				if st.kind == stepNext && pc[s+1] < len(progs[s+1]) && progs[s+1][pc[s+1]].kind == stepPrev {
					other := progs[s+1][pc[s+1]]
					if other.recv != st.send || other.send != st.recv {
						return fmt.Errorf("link %d-%d: stage %d sends %d and receives %d, stage %d sends %d and receives %d",
							s, s+1, s, st.send, st.recv, s+1, other.send, other.recv)
					}
					pc[s]++
					pc[s+1]++
					moved = true
				}
				break
			}
			finished = finished && pc[s] == len(progs[s])
		}
		if finished {
			return nil
		}
		if !moved {
			return fmt.Errorf("deadlock at steps %v", pc)
		}
	}
}

// TestOneFOneBKeepsFewerInFlight checks the point of 1F1B: stage s keeps
// at most K−s micro-batches in flight, GPipe all M.
func TestOneFOneBKeepsFewerInFlight(t *testing.T) {
	const k, m = 4, 8
	for s := range k {
		if got := inFlight(program(OneFOneB, s, k, m)); got != k-s {
			t.Errorf("1f1b stage %d: %d in flight, want %d", s, got, k-s)
		}
		if got := inFlight(program(GPipe, s, k, m)); got != m {
			t.Errorf("gpipe stage %d: %d in flight, want %d", s, got, m)
		}
	}
}
