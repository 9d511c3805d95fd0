package train

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/plugins"
)

// dataset_strategy is refused, at /dataset_strategy and saying why, when
// its tuple does not fit the columns, the split or the devices, when it
// contradicts full_batch as MindSpore defines it, or in a mode without it.
func TestDatasetStrategyProblems(t *testing.T) {
	parse := func(s string) parallel.DatasetStrategy {
		t.Helper()
		var d parallel.DatasetStrategy
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	semi := With{Mode: parallel.SemiAutoParallel, Model: "cnn", BatchSize: 4}
	for _, tc := range []struct {
		name     string
		w        With
		strategy string
		devices  int
		what     string
	}{
		{"one list", semi, `[[1, 1, 2, 1]]`, 2, "1 split lists for a dataset of 2 columns"},
		{"image rank", semi, `[[1, 2, 1], [1]]`, 2, "dataset_strategy[0] has 3 entries [1 2 1], the image column has 4 dimensions"},
		{"labels rank", semi, `[[1, 1, 2, 1], [1, 1]]`, 2, "dataset_strategy[1] has 2 entries"},
		{"H not divided", semi, `[[1, 1, 3, 1], [1]]`, 3, "dataset_strategy[0][2] cuts dimension 2 of the image column (size 32) 3 ways, which does not divide it"},
		{"devices not divided", semi, `[[1, 1, 4, 1], [1]]`, 2, "dataset_strategy[0] [1 1 4 1] uses 4 devices, which does not divide the job's 2"},
		{"batch cut unlike", semi, `[[2, 1, 1, 1], [1]]`, 2, "every column must cut the batch alike"},
		{"zero", semi, `[[1, 1, 0, 1], [1]]`, 2, "dataset_strategy[0][2] is 0, want at least 1"},
		{"with full_batch", With{Mode: parallel.SemiAutoParallel, Model: "cnn", BatchSize: 4, FullBatch: true}, `[[1, 1, 2, 1], [1]]`, 2, "cannot be set while full_batch is true"},
		{"data_parallel with full_batch", With{Mode: parallel.SemiAutoParallel, Model: "cnn", BatchSize: 4, FullBatch: true}, `"data_parallel"`, 2, `"data_parallel" contradicts full_batch: true`},
		{"tuple in data_parallel", With{Mode: parallel.DataParallel, Model: "cnn", BatchSize: 4}, `[[1, 1, 2, 1], [1]]`, 2, "the tuple form is for semi_auto_parallel and auto_parallel, not data_parallel"},
		{"full_batch in data_parallel", With{Mode: parallel.DataParallel, Model: "cnn", BatchSize: 4}, `"full_batch"`, 2, "full_batch is for the modes that split the network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.w
			w.DatasetStrategy = parse(tc.strategy)
			problems := checkCluster(w, plugins.Cluster{Devices: tc.devices}, nil)
			if len(problems) != 1 || problems[0].Path != "/dataset_strategy" || !strings.Contains(problems[0].Message, tc.what) {
				t.Errorf("problems %+v, want one at /dataset_strategy saying %s", problems, tc.what)
			}
		})
	}
	for _, ok := range []struct {
		w        With
		strategy string
		devices  int
	}{
		{semi, `[[1, 1, 2, 1], [1]]`, 2},
		{semi, `[[2, 1, 2, 2], [2]]`, 8},
		{semi, `[[1, 1, 2, 2], [1]]`, 8},
		{With{Mode: parallel.AutoParallel, Model: "resnet20", BatchSize: 4}, `[[1, 1, 1, 4], [1]]`, 4},
		{semi, `"full_batch"`, 2},
		{With{Mode: parallel.DataParallel, Model: "cnn", BatchSize: 4}, `"data_parallel"`, 2},
	} {
		w := ok.w
		w.DatasetStrategy = parse(ok.strategy)
		if problems := checkCluster(w, plugins.Cluster{Devices: ok.devices}, nil); len(problems) != 0 {
			t.Errorf("%s %s on %d devices: problems %+v, want none", w.Mode, ok.strategy, ok.devices, problems)
		}
	}
	var d parallel.DatasetStrategy
	if err := json.Unmarshal([]byte(`"model_parallel"`), &d); err == nil || !strings.Contains(err.Error(), `"data_parallel", "full_batch" or a list of split lists`) {
		t.Errorf("an unknown string: %v", err)
	}
}
