package train_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/launch"
)

// TestFailureReportedWhenLogCannotBeWritten: a rank whose train.log0 is on
// a full disk cannot print why it fails. Its checkpoint directory is
// blocked by a file, so it fails at once; the stage's error must still say
// why (the rank reports it on the event stream), not only "exit status 1".
func TestFailureReportedWhenLogCannotBeWritten(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full to stand for a full disk: %v", err)
	}
	dataDir := synthData(t, 8)
	jobDir := t.TempDir()
	blocker := filepath.Join(launch.DeviceDir(jobDir, 0), "ckpt_0")
	if err := os.MkdirAll(filepath.Dir(blocker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fullLogEnv, "1")
	r := runStage(t.Context(), jobDir, 1, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone"}))
	if r.err == nil {
		t.Fatal("the stage succeeded with its checkpoint directory blocked")
	}
	if log, _ := os.ReadFile(launch.LogPath(jobDir, 0)); len(log) > 0 {
		t.Fatalf("train.log0 holds %q: the rank's output was meant to be lost", log)
	}
	if msg := r.err.Error(); !strings.Contains(msg, "rank 0: checkpoint directory") || !strings.Contains(msg, "not a directory") {
		t.Errorf("stage error %q does not say why rank 0 failed", msg)
	}
}
