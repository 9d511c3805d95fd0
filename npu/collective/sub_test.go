package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// SendRecv moves a block each way, or one way only, between the two ranks,
// and the values arrive intact.
func TestSendRecv(t *testing.T) {
	comms := group(t, 2, nil)
	act := []float32{1, 2, 3, 4, 5}
	grad := []float32{-1, -2}
	got := [2][]float32{make([]float32, len(grad)), make([]float32, len(act))}
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		ctx := context.Background()
		if r == 0 {
			if err := c.SendRecv(ctx, act, nil); err != nil { // forward only
				return err
			}
			return c.SendRecv(ctx, nil, got[0]) // backward only
		}
		if err := c.SendRecv(ctx, nil, got[1]); err != nil {
			return err
		}
		return c.SendRecv(ctx, grad, nil)
	}))
	if fmt.Sprint(got[1]) != fmt.Sprint(act) || fmt.Sprint(got[0]) != fmt.Sprint(grad) {
		t.Fatalf("rank 1 received %v (want %v), rank 0 %v (want %v)", got[1], act, got[0], grad)
	}
	// Both ways in one call.
	got = [2][]float32{make([]float32, len(grad)), make([]float32, len(act))}
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		if r == 0 {
			return c.SendRecv(context.Background(), act, got[0])
		}
		return c.SendRecv(context.Background(), grad, got[1])
	}))
	if fmt.Sprint(got[1]) != fmt.Sprint(act) || fmt.Sprint(got[0]) != fmt.Sprint(grad) {
		t.Fatalf("both ways: rank 1 received %v, rank 0 %v", got[1], got[0])
	}
}

// A receiver expecting another length fails, naming the sender by its
// job rank.
func TestSendRecvLengthMismatch(t *testing.T) {
	comms := group(t, 2, func(c *Config) { c.Members = []int{4, 6} })
	errs := onAll(comms, func(r int, c *Comm) error {
		if r == 0 {
			// The sender may finish its call before the receiver reads
			// the length; its next call fails.
			if err := c.SendRecv(context.Background(), make([]float32, 10), nil); err != nil {
				return err
			}
			return c.Barrier(context.Background())
		}
		return c.SendRecv(context.Background(), nil, make([]float32, 9))
	})
	if !errors.Is(errs[1], ErrOutOfStep) || !strings.Contains(errs[1].Error(), "rank 4 (") || !strings.Contains(errs[1].Error(), "sends 10 elements") {
		t.Errorf("rank 1: %v, want rank 4 out of step sending 10 elements", errs[1])
	}
	// The sender learns it from the receiver's notice: itself named, by
	// its job rank, reported by the receiver's.
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 4 (") || !strings.Contains(errs[0].Error(), "reported by rank 6") {
		t.Errorf("rank 0: %v, want rank 4 named, reported by rank 6", errs[0])
	}
}

func TestSendRecvNeedsTwoRanks(t *testing.T) {
	comms := group(t, 3, nil)
	errs := onAll(comms, func(r int, c *Comm) error { return c.SendRecv(context.Background(), []float32{1}, nil) })
	for r, err := range errs {
		if !errors.Is(err, ErrBuffer) && !errors.Is(err, ErrPeerAborted) {
			t.Errorf("rank %d: %v, want a refusal", r, err)
		}
	}
	if !strings.Contains(errs[0].Error(), "want 2") {
		t.Errorf("rank 0: %v", errs[0])
	}
}

// Sub numbers the members, moves their ports and keeps the job's rank
// numbers for messages.
func TestSub(t *testing.T) {
	job := Config{Rank: 5, Size: 8, Secret: testSecret(), Hosts: []int{0, 0, 0, 0, 1, 1, 1, 1}}
	for r := range 8 {
		job.Addrs = append(job.Addrs, fmt.Sprintf("127.0.0.%d:%d", r+1, 29500+r))
	}
	s, err := job.Sub([]int{1, 5}, 24)
	if err != nil {
		t.Fatal(err)
	}
	if s.Rank != 1 || s.Size != 2 || fmt.Sprint(s.Addrs) != "[127.0.0.2:29525 127.0.0.6:29529]" || fmt.Sprint(s.Hosts) != "[0 1]" || fmt.Sprint(s.Members) != "[1 5]" {
		t.Errorf("sub config %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]int{{0, 1}, {5, 5}, {5, 9}} {
		if _, err := job.Sub(bad, 8); !errors.Is(err, ErrConfig) {
			t.Errorf("members %v: %v, want ErrConfig", bad, err)
		}
	}
	if _, err := job.Sub([]int{5, 7}, 65535); !errors.Is(err, ErrConfig) {
		t.Errorf("port out of range: %v", err)
	}
}

// An abort whose cause names a rank of this communicator too (by its
// job rank) tells the peers that rank's failure, not the relaying rank's.
func TestAbortNamesAMemberCulprit(t *testing.T) {
	comms := group(t, 3, func(c *Config) { c.Timeout = 5 * time.Second; c.Members = []int{4, 5, 6} })
	cause := &PeerError{Op: "allreduce", Rank: 4, Addr: "127.0.0.1:9", Err: ErrPeerClosed, Via: -1} // job rank 4: member 0
	errs := onAll(comms, func(r int, c *Comm) error {
		if r == 2 {
			c.Abort(cause)
		}
		return c.Barrier(context.Background())
	})
	// Member 0 is alive here, so it learns that it was named and fails
	// too: the point is what member 1 hears. Which news reaches it first
	// is a race: member 2's notice ("reported by rank 6") or member 0's
	// own failure; either way it must name job rank 4, never rank 6.
	var pe *PeerError
	if !errors.As(errs[1], &pe) || pe.Rank != 0 || !errors.Is(errs[1], ErrPeerClosed) || !strings.Contains(errs[1].Error(), "rank 4 (") {
		t.Errorf("rank 1: %v, want job rank 4 closed", errs[1])
	}
	if msg := errs[1].Error(); strings.Contains(msg, "rank 6 (") {
		t.Errorf("rank 1: %v blames the relaying rank 6", errs[1])
	}
	if Relayed(errs[1]) {
		t.Errorf("rank 1: %v reported as relayed", errs[1])
	}
}

// Abort fails a communicator because of a failure elsewhere: the running
// call of this rank and its peers' return, carrying the cause.
func TestAbortCarriesTheCause(t *testing.T) {
	comms := group(t, 3, func(c *Config) { c.Timeout = 5 * time.Second; c.Members = []int{2, 3, 4} })
	cause := errors.New("collective: exchange: rank 6 (127.0.0.1:1) closed the connection")
	errs := onAll(comms, func(r int, c *Comm) error {
		if r == 1 {
			c.Abort(cause)
			return c.Barrier(context.Background())
		}
		return c.Barrier(context.Background())
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 6 (127.0.0.1:1) closed the connection") {
			t.Errorf("rank %d: %v, want the cause", r, err)
		}
	}
	if !strings.Contains(errs[0].Error(), "rank 3 (") {
		t.Errorf("rank 0: %v, want rank 3 (job rank of member 1) named as the one that aborted", errs[0])
	}
	select {
	case <-comms[0].Broken():
	default:
		t.Error("Broken not closed after a failure")
	}
}

// A failure passed on from another communicator names a rank numbered
// there: the peers are told this rank aborted (they must not read the
// other communicator's rank number as one of theirs), and this rank's
// call returns the original failure.
func TestAbortWithAnotherCommsPeerError(t *testing.T) {
	comms := group(t, 3, func(c *Config) { c.Timeout = 5 * time.Second })
	cause := &PeerError{Op: "exchange", Rank: 6, Addr: "127.0.0.1:7", Err: ErrPeerClosed, Via: -1}
	errs := onAll(comms, func(r int, c *Comm) error {
		if r == 2 {
			c.Abort(cause)
		}
		return c.Barrier(context.Background())
	})
	var pe *PeerError
	if !errors.As(errs[2], &pe) || pe.Rank != 6 || !strings.Contains(errs[2].Error(), "rank 6 (127.0.0.1:7) closed the connection") {
		t.Errorf("rank 2: %v, want the cause", errs[2])
	}
	if Relayed(errs[2]) {
		t.Errorf("rank 2's own error %v reported as relayed", errs[2])
	}
	for r := range 2 {
		wantPeer(t, fmt.Sprintf("rank %d", r), errs[r], 2, ErrPeerAborted)
		if !Relayed(errs[r]) {
			t.Errorf("rank %d: %v not reported as relayed", r, errs[r])
		}
		if !strings.Contains(errs[r].Error(), "rank 6 (127.0.0.1:7) closed the connection") {
			t.Errorf("rank %d: %v, want the cause quoted", r, errs[r])
		}
	}
}
