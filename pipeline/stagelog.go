package pipeline

import (
	"fmt"
	"os"
	"sync"
)

// MaxStageLogSize is the size at which a stage's log (stages/<id>/stage.log)
// is rotated: it is renamed stage.log.1, replacing the previous one, and a
// new stage.log is started. A stage that prints without end (a training
// loop logging every step for days) thus keeps at most twice this on disk:
// the newest output, which is what explains a failure. `mspipe logs` prints
// stage.log.1 before stage.log.
const MaxStageLogSize = 64 << 20

// stageLog is a stage's log file, safe for concurrent writers (the plugin's
// output pumps and its events), rotated at limit bytes.
type stageLog struct {
	mu    sync.Mutex
	path  string
	limit int64
	f     *os.File
	size  int64
}

// openStageLog opens (appending) the log at path, rotated at limit bytes.
func openStageLog(path string, limit int64) (*stageLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &stageLog{path: path, limit: limit, f: f, size: st.Size()}, nil
}

// Write appends p, rotating first when p would take the file past the
// limit (a single write larger than the limit gets a file of its own).
func (l *stageLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if l.size > 0 && l.size+int64(len(p)) > l.limit {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *stageLog) rotate() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("rotate %s: %w", l.path, err)
	}
	l.f = nil
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("rotate %s: %w", l.path, err)
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("rotate %s: %w", l.path, err)
	}
	l.f, l.size = f, 0
	return nil
}

// Close closes the current file.
func (l *stageLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
