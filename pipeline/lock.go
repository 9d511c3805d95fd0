package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// lockFile is the file in a run directory whose advisory lock (flock) the
// run's one writer holds for as long as it lives. The kernel drops the lock
// when that process ends in any way, kill -9 included, so a free lock on a
// run whose run.json says running means its owner is gone.
const lockFile = "lock"

// lockRetry bounds how long lockRun keeps trying a lock that is held only
// briefly, by a reader probing whether the owner is alive (runOwner).
const (
	lockRetry     = 500 * time.Millisecond
	lockRetryStep = 20 * time.Millisecond
)

// runLock is the held lock of a run directory.
type runLock struct {
	f *os.File
}

// lockRun takes the run directory's lock for this process and records the
// pid in it, or fails with ErrRunLocked naming the owner's pid. The file is
// opened close-on-exec, so plugins and commands never inherit the lock.
func lockRun(dir string) (*runLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open run lock: %w", err)
	}
	deadline := time.Now().Add(lockRetry)
	for {
		held, err := tryLock(f, true)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if held {
			break
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, lockedError(dir)
		}
		time.Sleep(lockRetryStep)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record the owner in %s: %w", path, err)
	}
	return &runLock{f: f}, nil
}

// release drops the lock; the pid stays in the file as the last owner.
func (l *runLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}

func lockedError(dir string) error {
	owner := "another mspipe process"
	if pid := lastOwner(dir); pid > 0 {
		owner = fmt.Sprintf("mspipe pid %d", pid)
	}
	return fmt.Errorf("run %s: %w: %s is writing to it (wait for it to end, or stop it and resume)",
		filepath.Base(dir), ErrRunLocked, owner)
}

// lastOwner is the pid the run's lock file records: its current owner while
// the lock is held, else the last one. 0 when unknown.
func lastOwner(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, lockFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// ownerAlive reports whether a process holds the run directory's lock. It
// takes a shared lock for an instant to find out, which a writer starting at
// that moment waits out (lockRetry). ok is false when it cannot tell: a
// platform without the lock, or a run directory it cannot open.
func ownerAlive(dir string) (alive, ok bool) {
	f, err := os.Open(filepath.Join(dir, lockFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// A run directory from before the lock existed, or one whose
			// owner has not yet created it: nothing can be said.
			return false, false
		}
		return false, false
	}
	defer f.Close()
	held, err := tryLock(f, false)
	if err != nil {
		return false, false
	}
	return !held, true
}

// observeOwner turns a run that run.json says is running, but whose owner
// is gone, into StatusInterrupted (with its running stages): what a reader
// shows. Only readers call it; the next writer (resume) replaces it.
func observeOwner(dir string, st *RunState) {
	if st.Terminal() {
		return
	}
	if alive, ok := ownerAlive(dir); !ok || alive {
		return
	}
	st.Status = StatusInterrupted
	if st.Error == "" {
		st.Error = "interrupted: its mspipe process ended without recording how the run ended"
		if pid := lastOwner(dir); pid > 0 {
			st.Error = fmt.Sprintf("interrupted: its mspipe process (pid %d) ended without recording how the run ended", pid)
		}
	}
	for _, ss := range st.Stages {
		if ss.Status == StatusRunning {
			ss.Status = StatusInterrupted
		}
	}
}
