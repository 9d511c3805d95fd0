//go:build slow

package tests

import (
	"os"
	"testing"
)

// TestStandaloneExampleLearns runs examples/standalone.yaml as a newcomer
// would and requires held-out accuracy of at least 80% on the synthetic set.
// It trains ResNet-20 for 4 epochs (minutes on a CPU), so it is behind the
// `slow` build tag: go test -tags slow -run Standalone -timeout 30m ./tests
func TestStandaloneExampleLearns(t *testing.T) {
	w := newWorkspace(t)
	spec, err := os.ReadFile("../examples/standalone.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w.write("standalone.yaml", string(spec))
	r := w.runFor(30*60, "run", "standalone.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	train := w.state(r.stdout).Stages["train"]
	acc, _ := train.Outputs["accuracy"].(float64)
	t.Logf("held-out accuracy %.4f, loss %v, %v images/s", acc, train.Outputs["loss"], train.Outputs["images_per_second"])
	if acc < 0.8 {
		t.Errorf("held-out accuracy %.4f, want at least 0.80", acc)
	}
}
