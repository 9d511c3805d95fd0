package job

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/trainer"
)

// Kinds of Fault.
const (
	// FaultKill: the rank SIGKILLs itself at the start of the step, as a
	// device that dies does.
	FaultKill = "kill"
	// FaultKillDuringSave: the rank SIGKILLs itself part-way (half-way
	// through its bytes) through writing the checkpoint of the step (with async_save, in the writer
	// goroutine while training goes on).
	FaultKillDuringSave = "kill_during_save"
)

// FaultFiredFile is left in the faulty rank's device directory just before
// it kills itself: a fault fires once per work directory, so that resuming
// the stage gets past it.
const FaultFiredFile = "fault_fired"

// Fault is an injected failure, for testing failure handling (a peer's
// death seen by the others, exception_save, resume): rank Rank dies at
// step Step of this training (counted from 1 over all epochs).
type Fault struct {
	Rank int    `json:"rank" jsonschema:"minimum=0" description:"the rank that dies (0 to devices-1)"`
	Step int    `json:"step" jsonschema:"minimum=1" description:"the step of this training (from 1, over all epochs) at which it dies; it must be one of the run's steps"`
	Kind string `json:"kind,omitempty" jsonschema:"enum=kill|kill_during_save" description:"kill (the default): SIGKILL at the start of the step; kill_during_save: SIGKILL part-way through writing the checkpoint of that step, which must be a save step"`
	// Shrink is the job of an elastic stage the fault fires in: 0 the
	// stage's first job, k the job started after its k-th shrink. Rank and
	// Step are then that job's (its ranks, its steps counted from 1 over
	// the whole training, as the stage's first job counts them).
	Shrink int `json:"shrink,omitempty" jsonschema:"minimum=0" description:"with on_failure: shrink, the job the fault fires in: 0 (the default) the stage's first, k the job that continues after the k-th shrink (rank is then one of that job's ranks; step still counts the whole training's steps from 1)"`
}

// Check checks the fault against a job of devices ranks.
func (f *Fault) Check(devices int) error {
	switch {
	case f.Kind != "" && f.Kind != FaultKill && f.Kind != FaultKillDuringSave:
		return fmt.Errorf("fault kind %q: want %s or %s", f.Kind, FaultKill, FaultKillDuringSave)
	case f.Rank < 0 || f.Rank >= devices:
		return fmt.Errorf("fault at rank %d: the job has ranks 0 to %d", f.Rank, devices-1)
	case f.Step < 1:
		return fmt.Errorf("fault at step %d: steps count from 1", f.Step)
	}
	return nil
}

// trainerFault is what rank's trainer gets of the job's fault: every rank
// checks it against the run (so a step the run does not have fails them
// all at once), and only the faulty rank acts on it, unless it already did
// in this device directory.
func trainerFault(f *Fault, rank int, say io.Writer) (*trainer.Fault, error) {
	if f == nil {
		return nil, nil
	}
	tf := &trainer.Fault{Step: f.Step, DuringSave: f.Kind == FaultKillDuringSave}
	if f.Rank != rank {
		return tf, nil
	}
	_, err := os.Stat(FaultFiredFile)
	switch {
	case err == nil:
		fmt.Fprintf(say, "fault: rank %d already died at step %d in this work directory (%s): not injected again\n", rank, f.Step, FaultFiredFile)
		return tf, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("fault: %w", err)
	}
	kind := f.Kind
	if kind == "" {
		kind = FaultKill
	}
	tf.Act = func() {
		if err := atomicfile.WriteFile(FaultFiredFile, []byte(fmt.Sprintf("%s at step %d\n", kind, f.Step)), 0o644); err != nil {
			fmt.Fprintf(say, "fault: %v (it may fire again on resume)\n", err)
		}
		fmt.Fprintf(say, "fault injection: rank %d kills itself (SIGKILL, %s) at step %d\n", rank, kind, f.Step)
		// Process.Kill is SIGKILL on Unix (it cannot be caught: the
		// process ends here) and TerminateProcess elsewhere.
		if p, err := os.FindProcess(os.Getpid()); err == nil && p.Kill() == nil {
			select {}
		}
		os.Exit(137) // as a shell reports a SIGKILLed process
	}
	return tf, nil
}
