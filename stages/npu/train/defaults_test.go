package train

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Each default is written once: the schema mspipe checks and editors show,
// the With the stage's Execute receives and the trainer's Config all agree.
func TestDefaultsAgree(t *testing.T) {
	desc, err := New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(desc.WithSchema, &schema); err != nil {
		t.Fatal(err)
	}
	schemaDefaults := map[string]any{}
	for name, p := range schema.Properties {
		if d, ok := p["default"]; ok {
			schemaDefaults[name] = d
		}
	}

	// What the stage's Execute gets for a block that sets only data.
	stage := New().(sdk.Stage[With])
	var got With
	stage.Execute = func(_ context.Context, _ sdk.Context, w With) (map[string]any, error) {
		got = w
		return nil, nil
	}
	if _, err := stage.Run(context.Background(), plugins.RunRequest{With: map[string]any{"data": "/d"}}, nil); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var stageValues map[string]any
	if err := json.Unmarshal(raw, &stageValues); err != nil {
		t.Fatal(err)
	}
	for name, d := range schemaDefaults {
		if name == "mode" || name == "launcher" {
			continue // the zero Mode and Launcher, omitted from JSON: checked below
		}
		if !reflect.DeepEqual(stageValues[name], d) {
			t.Errorf("%s: schema default %v, the stage gets %v", name, d, stageValues[name])
		}
	}
	want := []string{"batch_size", "collective_transport", "epochs", "keep_checkpoint_max", "launcher", "learning_rate", "lr_schedule", "mode", "model", "momentum", "prefix", "seed"}
	for _, name := range want {
		if _, ok := schemaDefaults[name]; !ok {
			t.Errorf("%s: no default in the schema", name)
		}
	}
	if len(schemaDefaults) != len(want) {
		t.Errorf("schema defaults %v, want %v", schemaDefaults, want)
	}
	if got.Mode != parallel.StandAlone || schemaDefaults["mode"] != "stand_alone" {
		t.Errorf("mode: stage %v, schema %v; want stand_alone", got.Mode, schemaDefaults["mode"])
	}
	if got.Launcher != launch.Local || schemaDefaults["launcher"] != "local" {
		t.Errorf("launcher: stage %v, schema %v; want local", got.Launcher, schemaDefaults["launcher"])
	}

	// What the trainer runs with.
	cfg, err := resolve(got)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := job.TrainerConfig(cfg, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	td := trainer.Defaults()
	for _, f := range []struct {
		name       string
		rank, want any
	}{
		{"model", tc.Model, td.Model}, {"epochs", tc.Epochs, td.Epochs}, {"batch_size", tc.BatchSize, td.BatchSize},
		{"learning_rate", tc.LearningRate, td.LearningRate}, {"momentum", tc.Momentum, td.Momentum},
		{"lr_schedule", tc.Schedule, td.Schedule}, {"prefix", tc.Prefix, td.Prefix},
		{"keep_checkpoint_max", tc.KeepCheckpointMax, td.KeepCheckpointMax},
	} {
		if f.rank != f.want {
			t.Errorf("%s: the rank's trainer gets %v, the trainer's default is %v", f.name, f.rank, f.want)
		}
		if raw, _ := json.Marshal(f.want); string(raw) != string(mustJSON(t, schemaDefaults[f.name])) {
			t.Errorf("%s: schema default %v, trainer default %v", f.name, schemaDefaults[f.name], f.want)
		}
	}
	if tc.NoMomentum || tc.NumShards != 1 || tc.DeviceMemory != 0 {
		t.Errorf("trainer config %+v: want momentum on, one shard, the default device memory", tc)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Options that do not fit the mode are refused before anything runs, each
// at its field.
func TestCheckRefusesOptionsOfOtherModes(t *testing.T) {
	for _, tc := range []struct {
		w    With
		path string
		want string
	}{
		{With{Mode: parallel.DataParallel, Strategy: map[string][][]int{"fc.matmul": {{1, 1}, {1, 2}}}}, "/strategy", "mode data_parallel takes none: it does not split operators"},
		{With{Mode: parallel.AutoParallel, Strategy: map[string][][]int{"fc.matmul": {{1, 1}, {1, 2}}}}, "/strategy", "it searches every operator's strategy itself"},
		{With{Mode: parallel.HybridParallel, Strategy: map[string][][]int{"fc.matmul": {{1, 1}, {1, 2}}}}, "/strategy", "the model declares its own split"},
		{With{Mode: parallel.DataParallel, FullBatch: true}, "/full_batch", "not data_parallel"},
		{With{Mode: parallel.SemiAutoParallel, Model: "hybrid_net"}, "/model", "it runs in mode hybrid_parallel"},
	} {
		problems := checkCluster(tc.w, plugins.Cluster{}, nil)
		if len(problems) != 1 || problems[0].Path != tc.path || !strings.Contains(problems[0].Message, tc.want) {
			t.Errorf("%+v: problems %v, want one at %s saying %q", tc.w, problems, tc.path, tc.want)
		}
	}
	for _, m := range parallel.Modes() {
		if problems := append(check(With{Mode: m}), checkCluster(With{Mode: m, Model: "resnet20", BatchSize: 32}, plugins.Cluster{Devices: 8}, nil)...); len(problems) != 0 {
			t.Errorf("mode %s alone: %v", m, problems)
		}
	}
	if problems := checkCluster(With{Mode: parallel.SemiAutoParallel, Model: "semi_auto_net", BatchSize: 4, Strategy: map[string][][]int{"fc.matmul": {{1, 1}, {1, 2}}}, FullBatch: true}, plugins.Cluster{Devices: 8}, nil); len(problems) != 0 {
		t.Errorf("semi_auto_parallel with a strategy and full_batch: %v", problems)
	}
	// A rule over a field known only at run time waits for the run.
	if problems := checkCluster(With{Mode: parallel.DataParallel, FullBatch: true}, plugins.Cluster{}, []string{"mode"}); len(problems) != 0 {
		t.Errorf("full_batch with the mode unknown: %v", problems)
	}
}

// A device memory that is no size is refused at its field; the stage
// resolves one that is into bytes, the rank job's unit.
func TestDeviceMemory(t *testing.T) {
	problems := check(With{Mode: parallel.StandAlone, DeviceMemory: "lots"})
	if len(problems) != 1 || problems[0].Path != "/device_memory" || !strings.Contains(problems[0].Message, `device memory "lots": want a size`) {
		t.Errorf("check: %+v", problems)
	}
	cfg, err := resolve(With{DeviceMemory: "1.5GiB"})
	if err != nil || cfg.DeviceMemory != 3<<29 {
		t.Errorf("1.5GiB resolves to %d bytes, %v; want %d", cfg.DeviceMemory, err, 3<<29)
	}
}

// A semi_auto_parallel strategy is checked against the model's operators
// on the stage's device count, each operator's entry at its own path.
func TestCheckClusterStrategy(t *testing.T) {
	w := With{Mode: parallel.SemiAutoParallel, Model: "semi_auto_net", BatchSize: 4, Strategy: map[string][][]int{
		"fc.matmul":  {{1, 1}, {1, 3}},
		"fc.matmull": {{1, 1}, {1, 2}},
		"relu":       {{2, 2}},
	}}
	problems := checkCluster(w, plugins.Cluster{Devices: 8}, nil)
	want := map[string]string{
		"/strategy/fc.matmul":  "the strategy uses 3 devices, which does not divide the job's 8",
		"/strategy/fc.matmull": `semi_auto_net has no operator "fc.matmull" (operators: flatten, fc.matmul, relu,`,
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %v, want %d", problems, len(want))
	}
	for _, p := range problems {
		if !strings.Contains(p.Message, want[p.Path]) {
			t.Errorf("%s: %q, want %q", p.Path, p.Message, want[p.Path])
		}
	}
	// Devices unknown before the run, or the strategy itself: nothing yet.
	if problems := checkCluster(w, plugins.Cluster{}, nil); len(problems) != 0 {
		t.Errorf("no device count: %v", problems)
	}
	if problems := checkCluster(w, plugins.Cluster{Devices: 8}, []string{"strategy"}); len(problems) != 0 {
		t.Errorf("strategy unknown: %v", problems)
	}
	w.Strategy = map[string][][]int{"fc.matmul": {{1, 1}, {1, 2}}}
	if problems := checkCluster(w, plugins.Cluster{Devices: 8}, nil); len(problems) != 0 {
		t.Errorf("the seeds' strategy on 8 devices: %v", problems)
	}
}
