package sdk

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
)

type trainWith struct {
	Data    string   `json:"data" jsonschema:"minLength=1"`
	Epochs  int      `json:"epochs,omitempty" jsonschema:"minimum=1,default=2"`
	LR      float64  `json:"lr,omitempty" jsonschema:"exclusiveMinimum=0,default=0.1"`
	Mode    string   `json:"mode,omitempty" jsonschema:"enum=stand_alone|data_parallel,default=stand_alone"`
	Layers  []string `json:"layers,omitempty" jsonschema:"pattern=^[a-z]+$"`
	Options struct {
		Seed int `json:"seed,omitempty" jsonschema:"default=7"`
	} `json:"options,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

func trainStage() Stage[trainWith] {
	return Stage[trainWith]{
		Name:    "npu/fake-train",
		Version: "0.0.1",
		Outputs: []plugins.OutputSpec{{Name: "epochs", Type: plugins.TypeInt}},
		Check: func(w trainWith) []plugins.Problem {
			if w.Mode == "data_parallel" && w.Epochs > 10 {
				return []plugins.Problem{{Path: "/epochs", Message: "data_parallel runs at most 10 epochs here"}}
			}
			return nil
		},
		Execute: func(_ context.Context, sc Context, w trainWith) (map[string]any, error) {
			sc.Info("training", "epochs", w.Epochs, "lr", w.LR, "seed", w.Options.Seed)
			return map[string]any{"epochs": w.Epochs}, nil
		},
	}
}

func TestStageValidate(t *testing.T) {
	s := trainStage()
	tests := []struct {
		name string
		with map[string]any
		want []plugins.Problem
	}{
		{"ok", map[string]any{"data": "d"}, nil},
		{"ok with all", map[string]any{"data": "d", "epochs": int64(3), "lr": 0.5, "mode": "data_parallel", "layers": []any{"fc"}, "timeout": "90s"}, nil},
		{"wrong type", map[string]any{"data": "d", "epochs": "two"}, []plugins.Problem{{Path: "/epochs", Message: "want int, got string"}}},
		{"float for int", map[string]any{"data": "d", "epochs": 2.5}, []plugins.Problem{{Path: "/epochs", Message: "want int, got number 2.5"}}},
		{"integral float for int", map[string]any{"data": "d", "epochs": 2.0}, []plugins.Problem{{Path: "/epochs", Message: "want int, got number 2.0"}}},
		{"nested wrong type", map[string]any{"data": "d", "options": map[string]any{"seed": "x"}}, []plugins.Problem{{Path: "/options/seed", Message: "want int, got string"}}},
		{"not an array", map[string]any{"data": "d", "layers": "fc"}, []plugins.Problem{{Path: "/layers", Message: "want []string, got string"}}},
		{"unknown field", map[string]any{"data": "d", "epoch": int64(1)}, []plugins.Problem{{Path: "", Message: `unknown field "epoch"`}}},
		{"nested unknown field", map[string]any{"data": "d", "options": map[string]any{"salt": 1}}, []plugins.Problem{{Path: "", Message: `unknown field "salt"`}}},
		{"bad duration", map[string]any{"data": "d", "timeout": "soon"}, []plugins.Problem{{Path: "", Message: `duration "soon": time: invalid duration "soon"`}}},
		// Keywords of the schema are mspipe's to check (TestHostChecksSchemaKeywords).
		{"missing required", map[string]any{}, nil},
		{"minimum", map[string]any{"data": "d", "epochs": int64(0)}, nil},
		{"enum", map[string]any{"data": "d", "mode": "auto"}, nil},
		{"item pattern", map[string]any{"data": "d", "layers": []any{"fc", "FC2"}}, nil},
		{"check", map[string]any{"data": "d", "mode": "data_parallel", "epochs": int64(11)}, []plugins.Problem{{Path: "/epochs", Message: "data_parallel runs at most 10 epochs here"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Validate(context.Background(), plugins.ValidateRequest{With: tt.with})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].Path != tt.want[i].Path || !strings.Contains(got[i].Message, tt.want[i].Message) {
					t.Errorf("problem %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestStageRunAppliesDefaults(t *testing.T) {
	s := trainStage()
	var events []plugins.Event
	with := map[string]any{"data": "d", "options": map[string]any{}}
	out, err := s.Run(context.Background(), plugins.RunRequest{With: with}, func(e plugins.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if out["epochs"] != 2 {
		t.Errorf("outputs = %v", out)
	}
	if len(events) != 1 || !reflect.DeepEqual(events[0].Log.Fields, map[string]any{"epochs": 2, "lr": 0.1, "seed": 7}) {
		t.Errorf("events = %+v", events[0].Log)
	}
	if len(with) != 2 || len(with["options"].(map[string]any)) != 0 {
		t.Errorf("Run modified the caller's with: %v", with)
	}
	_, err = s.Run(context.Background(), plugins.RunRequest{With: map[string]any{"data": "d", "epochs": "two"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "invalid with: /epochs: want int, got string") {
		t.Errorf("invalid with: err = %v", err)
	}
	if _, err := (Stage[trainWith]{Name: "x"}).Run(context.Background(), plugins.RunRequest{}, nil); err == nil {
		t.Error("Run without Execute succeeded")
	}
}

func TestStageDescribe(t *testing.T) {
	d, err := trainStage().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "npu/fake-train" || d.Version != "0.0.1" || len(d.Outputs) != 1 || !reflect.DeepEqual(d.ProtocolVersions, []int{plugins.ProtocolVersion}) {
		t.Errorf("descriptor = %+v", d)
	}
	if !strings.Contains(string(d.WithSchema), `"required":["data"]`) {
		t.Errorf("schema = %s", d.WithSchema)
	}
}

func TestContextEvents(t *testing.T) {
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "a.txt"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	var events []plugins.Event
	sc := NewContext(plugins.RunRequest{WorkDir: work, StageID: "s"}, func(e plugins.Event) { events = append(events, e) })
	sc.Warn("odd", "k", 1, 2, "dangling")
	sc.Progress(1, 4, "file", "")
	sc.Metric("loss", 1.5, 3)
	if err := sc.Artifact("a", "a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := sc.Artifact("missing", "nope.txt"); err == nil || !strings.Contains(err.Error(), `artifact "missing"`) {
		t.Errorf("missing artifact: err = %v", err)
	}
	if len(events) != 4 {
		t.Fatalf("events = %+v", events)
	}
	if l := events[0].Log; l.Level != plugins.LevelWarn || !reflect.DeepEqual(l.Fields, map[string]any{"k": 1, "!BADKEY": "dangling"}) {
		t.Errorf("log = %+v", l)
	}
	if p := events[1].Progress; p.Done != 1 || p.Total != 4 || p.Unit != "file" {
		t.Errorf("progress = %+v", p)
	}
	if m := events[2].Metric; m.Name != "loss" || m.Value != 1.5 || m.Step != 3 {
		t.Errorf("metric = %+v", m)
	}
	if a := events[3].Artifact; a.Path != "a.txt" || a.SHA256 != fmt.Sprintf("%x", sha256.Sum256([]byte("abc"))) {
		t.Errorf("artifact = %+v", a)
	}
	for _, e := range events {
		if time.Since(e.Time) > time.Minute {
			t.Errorf("event time %v", e.Time)
		}
	}
	if sc.WorkDir() != work || sc.Request().StageID != "s" {
		t.Errorf("request = %+v", sc.Request())
	}
	NewContext(plugins.RunRequest{}, nil).Info("no sink") // must not panic
}

// clusterStage splits a strategy over the devices: CheckCluster refuses a
// product of splits that does not divide the device count.
func clusterStage(got *[]plugins.Cluster, gotUnknown *[][]string, executed *bool) Stage[trainWith] {
	s := trainStage()
	s.CheckCluster = func(w trainWith, c plugins.Cluster, unknown []string) []plugins.Problem {
		*got = append(*got, c)
		*gotUnknown = append(*gotUnknown, unknown)
		var out []plugins.Problem
		if c.Devices > 0 && c.Devices%w.Epochs != 0 {
			out = append(out, plugins.Problem{Path: "/epochs", Message: fmt.Sprintf("%d does not divide %d devices", w.Epochs, c.Devices)})
		}
		if c.Devices > 0 && w.Data == "" {
			// A check that forgets unknown: Validate drops it for an unknown data.
			out = append(out, plugins.Problem{Path: "/data", Message: "empty"})
		}
		return out
	}
	s.Execute = func(context.Context, Context, trainWith) (map[string]any, error) {
		*executed = true
		return map[string]any{"epochs": 1}, nil
	}
	return s
}

func TestStageCheckClusterInValidate(t *testing.T) {
	var clusters []plugins.Cluster
	var unknowns [][]string
	executed := false
	s := clusterStage(&clusters, &unknowns, &executed)
	tests := []struct {
		name string
		req  plugins.ValidateRequest
		want string
	}{
		{"divides", plugins.ValidateRequest{With: map[string]any{"data": "d", "epochs": int64(4)}, Cluster: plugins.Cluster{Devices: 8}}, ""},
		{"does not divide", plugins.ValidateRequest{With: map[string]any{"data": "d", "epochs": int64(3)}, Cluster: plugins.Cluster{Devices: 8}}, "/epochs: 3 does not divide 8 devices"},
		{"default epochs", plugins.ValidateRequest{With: map[string]any{"data": "d"}, Cluster: plugins.Cluster{Devices: 7}}, "/epochs: 2 does not divide 7 devices"},
		{"devices unknown", plugins.ValidateRequest{With: map[string]any{"data": "d", "epochs": int64(3)}}, ""},
		{"data unknown", plugins.ValidateRequest{With: map[string]any{"epochs": int64(4)}, Cluster: plugins.Cluster{Devices: 8}, Unknown: []string{"data"}}, ""},
		{"data missing", plugins.ValidateRequest{With: map[string]any{"epochs": int64(4)}, Cluster: plugins.Cluster{Devices: 8}}, "/data: empty"},
		{"after check", plugins.ValidateRequest{With: map[string]any{"data": "d", "mode": "data_parallel", "epochs": int64(12)}, Cluster: plugins.Cluster{Devices: 8}},
			"/epochs: data_parallel runs at most 10 epochs here; /epochs: 12 does not divide 8 devices"},
		// Check's problem at an unknown key is about a default, not the real value.
		{"check at unknown key", plugins.ValidateRequest{With: map[string]any{"data": "d", "mode": "data_parallel", "epochs": int64(12)}, Unknown: []string{"epochs"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clusters, unknowns = nil, nil
			problems, err := s.Validate(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := plugins.JoinProblems(problems); got != tt.want {
				t.Errorf("problems = %q, want %q", got, tt.want)
			}
			if len(clusters) != 1 || clusters[0] != tt.req.Cluster || !reflect.DeepEqual(unknowns[0], tt.req.Unknown) {
				t.Errorf("CheckCluster saw %v %v, want %v %v", clusters, unknowns, tt.req.Cluster, tt.req.Unknown)
			}
		})
	}
	// A block that does not decode into W is not checked further.
	clusters = nil
	problems, err := s.Validate(context.Background(), plugins.ValidateRequest{With: map[string]any{"epochs": "x"}, Cluster: plugins.Cluster{Devices: 8}})
	if err != nil || plugins.JoinProblems(problems) != "/epochs: want int, got string" || len(clusters) != 0 {
		t.Errorf("undecodable block: problems %v, err %v, CheckCluster calls %d", problems, err, len(clusters))
	}
	if executed {
		t.Error("Validate executed the stage")
	}
}

func TestStageCheckClusterInRun(t *testing.T) {
	var clusters []plugins.Cluster
	var unknowns [][]string
	executed := false
	s := clusterStage(&clusters, &unknowns, &executed)
	work := t.TempDir()
	cluster := plugins.Cluster{Devices: 6, RankTable: "/specs/rank_table.json"}
	_, err := s.Run(context.Background(), plugins.RunRequest{WorkDir: work, Cluster: cluster, With: map[string]any{"data": "d", "epochs": int64(4)}}, nil)
	if err == nil || err.Error() != "invalid with: /epochs: 4 does not divide 6 devices" {
		t.Errorf("Run err = %v", err)
	}
	if executed {
		t.Error("the stage executed despite CheckCluster's problem")
	}
	if len(clusters) != 1 || clusters[0] != cluster || unknowns[0] != nil {
		t.Errorf("CheckCluster saw %v %v, want %v and no unknown keys", clusters, unknowns, cluster)
	}
	outputs, err := s.Run(context.Background(), plugins.RunRequest{WorkDir: work, Cluster: cluster, With: map[string]any{"data": "d", "epochs": int64(3)}}, nil)
	if err != nil || !executed || outputs["epochs"] != 1 {
		t.Errorf("Run = %v, %v (executed %v)", outputs, err, executed)
	}
	// Check's problems fail the run before CheckCluster is asked.
	clusters, executed = nil, false
	_, err = s.Run(context.Background(), plugins.RunRequest{WorkDir: work, Cluster: cluster, With: map[string]any{"data": "d", "mode": "data_parallel", "epochs": int64(12)}}, nil)
	if err == nil || err.Error() != "invalid with: /epochs: data_parallel runs at most 10 epochs here" || executed || len(clusters) != 0 {
		t.Errorf("Run err = %v, executed %v, CheckCluster calls %d", err, executed, len(clusters))
	}
}

type panicky struct{ plugins.Stage }

func (panicky) Validate(context.Context, plugins.ValidateRequest) ([]plugins.Problem, error) {
	var m map[string]int
	m["x"] = 1 // nil map write: a runtime panic
	return nil, nil
}

func (panicky) Run(context.Context, plugins.RunRequest, func(plugins.Event)) (map[string]any, error) {
	panic(fmt.Sprintf("boom %d", 42))
}

func TestServedRecoversPanics(t *testing.T) {
	s := &served{stage: panicky{}, base: context.Background()}
	var events []plugins.Event
	_, err := s.Run(context.Background(), plugins.RunRequest{}, func(e plugins.Event) { events = append(events, e) })
	if err == nil || !strings.Contains(err.Error(), "stage panicked: boom 42 (at stage_test.go:") || !strings.Contains(err.Error(), "panicky.Run)") {
		t.Errorf("Run err = %v", err)
	}
	if len(events) != 1 || events[0].Log.Level != plugins.LevelError || !strings.Contains(events[0].Log.Fields["stack"].(string), "stage_test.go") {
		t.Errorf("panic event = %+v", events)
	}
	_, err = s.Validate(context.Background(), plugins.ValidateRequest{})
	if err == nil || !strings.Contains(err.Error(), "assignment to entry in nil map (at stage_test.go:") {
		t.Errorf("Validate err = %v", err)
	}
}

func TestServedDrain(t *testing.T) {
	base, stop := context.WithCancel(context.Background())
	started, returned := make(chan struct{}), make(chan struct{})
	s := &served{base: base, stage: Stage[struct{}]{Name: "x", Execute: func(ctx context.Context, _ Context, _ struct{}) (map[string]any, error) {
		defer close(returned)
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}}}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background(), plugins.RunRequest{}, nil)
		errc <- err
	}()
	<-started
	stop()
	s.drain() // returns only once the running stage has returned
	select {
	case <-returned:
	default:
		t.Fatal("drain returned before the running stage")
	}
	// Run's own return, and the send above, may still be on their way.
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("running stage ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after drain")
	}
	if _, err := s.Run(context.Background(), plugins.RunRequest{}, nil); !errors.Is(err, errShuttingDown) {
		t.Errorf("Run after drain = %v", err)
	}
}

func TestServeContextNotLaunched(t *testing.T) {
	t.Setenv(plugins.MagicCookieKey, "")
	err := ServeContext(context.Background(), trainStage())
	if !errors.Is(err, ErrNotLaunched) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"is an mspipe stage plugin", `stage "npu/fake-train" version 0.0.1`, "mspipe-stage-npu-fake-train", `"uses: npu/fake-train"`, "$MSPIPE_PLUGIN_PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{`"90s"`, 90 * time.Second, ""},
		{`"1h30m"`, 90 * time.Minute, ""},
		{`30`, 30 * time.Second, ""},
		{`0.5`, 500 * time.Millisecond, ""},
		{`"soon"`, 0, `duration "soon"`},
		{`-1`, 0, "out of range"},
		{`"-5s"`, 0, "is negative"},
		{`true`, 0, "want a string"},
	}
	for _, tt := range tests {
		var d Duration
		err := d.UnmarshalJSON([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || time.Duration(d) != tt.want {
			t.Errorf("%s = %v, %v, want %v", tt.in, d, err, tt.want)
		}
	}
	if b, _ := Duration(90 * time.Second).MarshalJSON(); string(b) != `"1m30s"` {
		t.Errorf("MarshalJSON = %s", b)
	}
}

// TestHostChecksSchemaKeywords: what the derived schema says beyond types
// is checked by mspipe, not by the SDK, so the SDK's Validate accepts these
// blocks while mspipe's check against the described schema refuses them.
func TestHostChecksSchemaKeywords(t *testing.T) {
	s := trainStage()
	d, err := s.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	schema, err := spec.CompileSchema(d.Name, d.WithSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, with := range []map[string]any{
		{"data": "d"},
		{"data": "d", "epochs": int64(3), "lr": 0.5, "mode": "data_parallel", "layers": []any{"fc"}, "timeout": "90s"},
	} {
		if err := schema.Validate(with); err != nil {
			t.Errorf("%v: mspipe refuses a good block: %v", with, err)
		}
	}
	tests := []struct {
		name string
		with map[string]any
		want string // in mspipe's message
	}{
		{"missing required", map[string]any{}, "missing property 'data'"},
		{"min length", map[string]any{"data": ""}, "minLength: got 0, want 1"},
		{"minimum", map[string]any{"data": "d", "epochs": int64(0)}, "minimum: got 0, want 1"},
		{"exclusive minimum", map[string]any{"data": "d", "lr": 0.0}, "exclusiveMinimum"},
		{"enum", map[string]any{"data": "d", "mode": "auto"}, "value must be one of 'stand_alone', 'data_parallel'"},
		{"item pattern", map[string]any{"data": "d", "layers": []any{"fc", "FC2"}}, "'FC2' does not match pattern '^[a-z]+$'"},
	}
	for _, tt := range tests {
		problems, err := s.Validate(context.Background(), plugins.ValidateRequest{With: tt.with})
		if err != nil || len(problems) > 0 {
			t.Errorf("%s: the SDK reports %v, %v; want nothing", tt.name, problems, err)
		}
		if err := schema.Validate(tt.with); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: mspipe says %v, want %q", tt.name, err, tt.want)
		}
	}
}
