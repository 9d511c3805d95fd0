//go:build !unix

package pipeline

import (
	"fmt"
	"os"
	"runtime"
)

// tryLock fails: run locks use flock, which this platform lacks. Runs
// cannot run here anyway (internal/procgroup), and readers show the state
// run.json records.
func tryLock(*os.File, bool) (bool, error) {
	return false, fmt.Errorf("run locks (flock) are not supported on %s; run pipelines on Linux or macOS", runtime.GOOS)
}
