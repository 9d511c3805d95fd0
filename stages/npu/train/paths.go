package train

import (
	"fmt"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/plugins"
)

// checkSaveFile is the validation-time half of checkWrites: a
// strategy_ckpt_save_file that is absolute or climbs out of the work
// directory is refused before the run starts.
func checkSaveFile(w With) []plugins.Problem {
	if w.StrategySaveFile == "" {
		return nil
	}
	if err := userfile.Relative(w.StrategySaveFile); err != nil {
		return []plugins.Problem{{Path: "/strategy_ckpt_save_file", Message: err.Error() + " (the stage's work directory)"}}
	}
	return nil
}

// checkWrites refuses, before the job writes anything, a job whose writes
// would leave its work directory: the strategy file must resolve inside
// it, and no symbolic link in it may lead outside (ranks write device{i}/,
// their logs and checkpoints through whatever is there). It returns where
// the strategy file goes ("" when the job saves none).
func checkWrites(jobDir string, w With, devices int) (string, error) {
	path := ""
	if (job.UsesEngine(w.Model, w.Mode) || w.ParallelOptimizer) && devices > 1 {
		name := w.StrategySaveFile
		if name == "" {
			name = defaultStrategyFile
		}
		var err error
		if path, err = userfile.WritableWithin(jobDir, name); err != nil {
			return "", &job.FieldError{Field: "strategy_ckpt_save_file", Err: err}
		}
	}
	if _, err := userfile.WritableWithin(jobDir, "."); err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	return path, nil
}
