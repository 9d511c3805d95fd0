package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCustomPluginExample runs examples/custom-plugin.yaml with the example
// plugin built by plain go build, as its README says, then checks that a
// wrong sha256 pin refuses to start the binary.
func TestCustomPluginExample(t *testing.T) {
	w := newWorkspace(t)
	bin, err := os.ReadFile(augmentPlugin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(w.dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "plugins", "mspipe-stage-cifar-augment"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../examples/custom-plugin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w.write("custom-plugin.yaml", string(example))
	r := w.run("run", "custom-plugin.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	st := w.state(r.stdout)
	if got := st.Stages["augment"].Outputs["train_count"]; got != float64(2000) {
		t.Errorf("augment train_count = %v, want 2000 (1000 images doubled)", got)
	}
	if !strings.Contains(r.stderr, "augmented to 2000 training images") {
		t.Errorf("report stage output missing:\n%s", r.stderr)
	}

	sum := sha256.Sum256(bin)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("ab", 32)
	pinned := strings.Replace(string(example), "    uses: cifar-augment\n", "    uses: cifar-augment\n    sha256: PIN\n", 1)
	w.write("good-pin.yaml", strings.Replace(pinned, "PIN", good, 1))
	if r := w.run("run", "good-pin.yaml", "--no-cache"); r.code != 0 {
		t.Errorf("correct pin: exit %d\n%s", r.code, r.stderr)
	}
	w.write("bad-pin.yaml", strings.Replace(pinned, "PIN", bad, 1))
	r = w.run("validate", "bad-pin.yaml")
	if r.code != 1 || !strings.Contains(r.stdout, "checksum mismatch") {
		t.Errorf("validate with a wrong pin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if pids := w.waitNoProcesses(0); len(pids) > 0 {
		t.Errorf("processes running after validate: %v", pids)
	}
}
