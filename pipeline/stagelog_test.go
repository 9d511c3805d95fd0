package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/spec"
)

// chattyLauncher is a scriptLauncher whose plugins print lines lines of
// 1 KiB to the stage log when launched.
type chattyLauncher struct {
	scriptLauncher
	lines int
}

func (l *chattyLauncher) Launch(ctx context.Context, p *spec.Pipeline, s *spec.Stage, log io.Writer) (Process, error) {
	line := strings.Repeat("x", 1023-len("line 000000 ")) + "\n"
	for i := 0; i < l.lines; i++ {
		if _, err := fmt.Fprintf(log, "line %06d %s", i, line); err != nil {
			return nil, err
		}
	}
	return l.scriptLauncher.Launch(ctx, p, s, log)
}

// TestStageLogRotates: a stage printing more than MaxStageLogSize keeps
// at most MaxStageLogSize in stage.log and the previous part in
// stage.log.1, and the last lines it printed are in stage.log.
func TestStageLogRotates(t *testing.T) {
	w := newWorkspace(t)
	lines := MaxStageLogSize/1024 + 4096 // 68 MiB
	l := &chattyLauncher{lines: lines}
	st := w.mustRun(w.engine(l), "version: 1\nname: chatty\nstages:\n  a: {uses: work}\n")
	dir := filepath.Join(w.store.Dir, st.ID, "stages", "a")
	cur, err := os.ReadFile(filepath.Join(dir, "stage.log"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.Stat(filepath.Join(dir, "stage.log.1"))
	if err != nil {
		t.Fatalf("no rotated log: %v (stage.log is %d bytes)", err, len(cur))
	}
	if len(cur) > MaxStageLogSize || old.Size() > MaxStageLogSize {
		t.Errorf("stage.log %d bytes, stage.log.1 %d: over the %d-byte cap", len(cur), old.Size(), MaxStageLogSize)
	}
	if total := int64(len(cur)) + old.Size(); total < int64(lines)*1024 {
		t.Errorf("logs hold %d bytes, the stage printed %d", total, lines*1024)
	}
	if last := fmt.Sprintf("line %06d ", lines-1); !bytes.Contains(cur, []byte(last)) {
		t.Errorf("stage.log lacks the last line %q", last)
	}
}

// TestStageLogRotationKeepsOneOld: a second rotation replaces stage.log.1,
// and a write larger than the limit gets a file of its own.
func TestStageLogRotationKeepsOneOld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stage.log")
	l, err := openStageLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"aaaa\n", "bbbb\n", "cccc\n", "dddddddddddddddd\n", "eeee\n"} {
		if _, err := io.WriteString(l, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"stage.log": "eeee\n", "stage.log.1": "dddddddddddddddd\n"} {
		got, err := os.ReadFile(filepath.Join(filepath.Dir(path), name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}
