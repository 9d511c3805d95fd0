package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	stagev1 "github.com/mspipe/mspipe/plugins/proto/stage/v1"
)

// fakeStage is a Stage whose answers the test sets.
type fakeStage struct {
	desc     Descriptor
	problems []Problem
	run      func(ctx context.Context, req RunRequest, emit func(Event)) (map[string]any, error)

	mu          sync.Mutex
	gotValidate ValidateRequest
	gotRunRq    RunRequest
}

func (f *fakeStage) Describe(context.Context) (Descriptor, error) { return f.desc, nil }

func (f *fakeStage) Validate(_ context.Context, req ValidateRequest) ([]Problem, error) {
	f.mu.Lock()
	f.gotValidate = req
	f.mu.Unlock()
	return f.problems, nil
}

func (f *fakeStage) Run(ctx context.Context, req RunRequest, emit func(Event)) (map[string]any, error) {
	f.mu.Lock()
	f.gotRunRq = req
	f.mu.Unlock()
	return f.run(ctx, req, emit)
}

// inProcess connects a host-side Stage to impl through go-plugin's
// in-process gRPC client/server pair.
func inProcess(t *testing.T, impl Stage) *RemoteStage {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, PluginSet(impl))
	t.Cleanup(func() { client.Close() }) // its Shutdown call stops the server too
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatal(err)
	}
	gc, ok := raw.(*RemoteStage)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	return gc
}

func testDescriptor() Descriptor {
	return Descriptor{
		Name:        "test/fake",
		Version:     "1.2.3",
		Description: "A fake stage.",
		WithSchema:  json.RawMessage(`{"type":"object"}`),
		Outputs: []OutputSpec{
			{Name: "count", Type: TypeInt, Description: "a count"},
			{Name: "loss", Type: TypeFloat},
			{Name: "dir", Type: TypePath},
		},
		ProtocolVersions: []int{ProtocolVersion},
	}
}

func TestProtocolDescribe(t *testing.T) {
	want := testDescriptor()
	gc := inProcess(t, &fakeStage{desc: want})
	got, err := gc.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Describe = %+v, want %+v", got, want)
	}
}

func TestProtocolValidateKeepsIntsAndFloats(t *testing.T) {
	fake := &fakeStage{problems: []Problem{{Path: "/b", Message: "too big"}, {Message: "whole block"}}}
	gc := inProcess(t, fake)
	with := map[string]any{"a": 1, "b": 2.0, "c": []any{int64(1), "x", 0.5}, "d": map[string]any{"e": true, "n": nil}}
	problems, err := gc.Validate(context.Background(), ValidateRequest{With: with})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(problems, fake.problems) {
		t.Errorf("problems = %v, want %v", problems, fake.problems)
	}
	want := map[string]any{"a": int64(1), "b": 2.0, "c": []any{int64(1), "x", 0.5}, "d": map[string]any{"e": true, "n": nil}}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if !reflect.DeepEqual(fake.gotValidate.With, want) {
		t.Errorf("plugin received %#v, want %#v", fake.gotValidate.With, want)
	}
}

func TestProtocolValidateCarriesClusterAndUnknownKeys(t *testing.T) {
	fake := &fakeStage{problems: []Problem{{Path: "/strategy/fc.matmul", Message: "8 devices"}}}
	gc := inProcess(t, fake)
	req := ValidateRequest{
		With:    map[string]any{"mode": "semi_auto_parallel"},
		Cluster: Cluster{Devices: 8, RankTable: "/specs/rank_table_8pcs.json"},
		Unknown: []string{"data", "init"},
	}
	problems, err := gc.Validate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(problems, fake.problems) {
		t.Errorf("problems = %v, want %v", problems, fake.problems)
	}
	fake.mu.Lock()
	got := fake.gotValidate
	fake.mu.Unlock()
	if !reflect.DeepEqual(got, req) {
		t.Errorf("plugin received %+v, want %+v", got, req)
	}

	if _, err := gc.Validate(context.Background(), ValidateRequest{Cluster: Cluster{Devices: -1}}); err == nil || !strings.Contains(err.Error(), "cluster devices -1 out of range") {
		t.Errorf("negative devices: err = %v", err)
	}
}

// A host that predates the cluster and unknown fields sends only with: the
// stage sees a zero cluster (devices unknown) and no unknown keys.
func TestProtocolValidateFromAnOldHost(t *testing.T) {
	fake := &fakeStage{}
	srv := &grpcServer{impl: fake}
	if _, err := srv.Validate(context.Background(), &stagev1.ValidateRequest{With: []byte(`{"epochs":2}`)}); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	want := ValidateRequest{With: map[string]any{"epochs": int64(2)}}
	if !reflect.DeepEqual(fake.gotValidate, want) {
		t.Errorf("stage received %+v, want %+v", fake.gotValidate, want)
	}
}

func TestProtocolRunEventsAndOutputs(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	sent := []Event{
		{Time: at, Log: &LogEvent{Level: LevelWarn, Message: "hot", Fields: map[string]any{"n": int64(1), "f": 1.0, "s": "x"}}},
		{Time: at, Log: &LogEvent{Level: LevelDebug, Message: "no fields"}},
		{Time: at, Progress: &ProgressEvent{Done: 3, Total: 10, Unit: "step", Message: "epoch 1"}},
		{Time: at, Metric: &MetricEvent{Name: "loss", Value: 2.0084016, Step: 156}},
		{Time: at, Artifact: &ArtifactEvent{Name: "ckpt", Path: "ckpt_0/a.ckpt", SHA256: strings.Repeat("ab", 32)}},
		{Time: at, Step: &StepEvent{Rank: 3, Epoch: 2, Step: 156, GlobalStep: 312, TotalSteps: 1560, Loss: 1.6407638, LearningRate: 0.01, ImagesPerSecond: 812.5, DeviceMemory: 3 << 30, EpochEnd: true}},
	}
	fake := &fakeStage{run: func(_ context.Context, _ RunRequest, emit func(Event)) (map[string]any, error) {
		for _, e := range sent {
			emit(e)
		}
		emit(Event{}) // no payload: dropped
		return map[string]any{"i": 2, "f": 2.0, "s": "x", "l": []any{1, 1.5}, "m": map[string]any{"k": "v"}}, nil
	}}
	gc := inProcess(t, fake)
	req := RunRequest{RunID: "run-1", StageID: "train", With: map[string]any{"epochs": 2}, WorkDir: "/w",
		Cluster: Cluster{Devices: 8, RankTable: "/rt.json"}, Attempt: 2, Env: map[string]string{"K": "V"}}
	var got []Event
	outputs, err := gc.Run(context.Background(), req, func(e Event) { got = append(got, e) })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sent) {
		t.Errorf("events:\n got %+v\nwant %+v", got, sent)
	}
	wantOut := map[string]any{"i": int64(2), "f": 2.0, "s": "x", "l": []any{int64(1), 1.5}, "m": map[string]any{"k": "v"}}
	if !reflect.DeepEqual(outputs, wantOut) {
		t.Errorf("outputs = %#v, want %#v", outputs, wantOut)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	req.With = map[string]any{"epochs": int64(2)}
	if !reflect.DeepEqual(fake.gotRunRq, req) {
		t.Errorf("plugin received %+v, want %+v", fake.gotRunRq, req)
	}
}

func TestProtocolConcurrentEmit(t *testing.T) {
	const workers, each = 8, 100
	fake := &fakeStage{run: func(_ context.Context, _ RunRequest, emit func(Event)) (map[string]any, error) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					emit(Event{Metric: &MetricEvent{Name: fmt.Sprint(w), Step: int64(i)}})
				}
			}()
		}
		wg.Wait()
		return nil, nil
	}}
	gc := inProcess(t, fake)
	perWorker := map[string]int64{}
	n := 0
	_, err := gc.Run(context.Background(), RunRequest{}, func(e Event) {
		n++
		if e.Metric.Step != perWorker[e.Metric.Name] {
			t.Errorf("worker %s: step %d after %d", e.Metric.Name, e.Metric.Step, perWorker[e.Metric.Name]-1)
		}
		perWorker[e.Metric.Name]++
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != workers*each {
		t.Errorf("received %d events, want %d", n, workers*each)
	}
}

func TestProtocolCancelReachesPlugin(t *testing.T) {
	pluginSaw := make(chan error, 1)
	fake := &fakeStage{run: func(ctx context.Context, _ RunRequest, emit func(Event)) (map[string]any, error) {
		emit(Event{Log: &LogEvent{Message: "started"}})
		select {
		case <-ctx.Done():
			pluginSaw <- ctx.Err()
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			pluginSaw <- nil
			return nil, errors.New("not cancelled")
		}
	}}
	gc := inProcess(t, fake)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := gc.Run(ctx, RunRequest{}, func(Event) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("host got %v, want context.Canceled", err)
	}
	if err := <-pluginSaw; !errors.Is(err, context.Canceled) {
		t.Errorf("plugin's context ended with %v, want context.Canceled", err)
	}
}

func TestProtocolStageError(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"plain", errors.New("loss diverged at step 7")},
		{"own deadline", fmt.Errorf("command timed out: %w", context.DeadlineExceeded)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gc := inProcess(t, &fakeStage{run: func(context.Context, RunRequest, func(Event)) (map[string]any, error) {
				return nil, tt.err
			}})
			_, err := gc.Run(context.Background(), RunRequest{}, nil)
			if err == nil || err.Error() != tt.err.Error() {
				t.Errorf("err = %v, want %q", err, tt.err)
			}
			if errors.Is(err, ErrPluginExited) {
				t.Errorf("a stage error reads as a plugin exit: %v", err)
			}
		})
	}
}

func TestCheckOutputsWildcard(t *testing.T) {
	d := Descriptor{Name: "exec", Outputs: []OutputSpec{{Name: "exit_code", Type: TypeInt}, {Name: WildcardOutput, Type: TypeAny}}}
	got, err := CheckOutputs(d, "", map[string]any{"exit_code": int64(0), "files": int64(3), "note": "x"})
	if err != nil || len(got) != 3 {
		t.Fatalf("CheckOutputs = %v, %v", got, err)
	}
	_, err = CheckOutputs(d, "", map[string]any{"exit_code": int64(0), "bad-name": 1})
	if !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), `"bad-name"`) {
		t.Errorf("err = %v, want a bad output name", err)
	}
}

// badServer answers Run with whatever events the test gives it.
type badServer struct {
	stagev1.UnimplementedStageServer
	events []*stagev1.RunEvent
}

func (s *badServer) Run(_ *stagev1.RunRequest, stream grpc.ServerStreamingServer[stagev1.RunEvent]) error {
	for _, e := range s.events {
		if err := stream.Send(e); err != nil {
			return err
		}
	}
	return nil
}

func TestMalformedRepliesAreErrors(t *testing.T) {
	result := func(outputs string) *stagev1.RunEvent {
		return &stagev1.RunEvent{Payload: &stagev1.RunEvent_Result{Result: &stagev1.Result{Outputs: []byte(outputs)}}}
	}
	logWith := func(fields string) *stagev1.RunEvent {
		return &stagev1.RunEvent{Payload: &stagev1.RunEvent_Log{Log: &stagev1.LogRecord{Message: "m", Fields: []byte(fields)}}}
	}
	artifact := func(sum string) *stagev1.RunEvent {
		return &stagev1.RunEvent{Payload: &stagev1.RunEvent_Artifact{Artifact: &stagev1.Artifact{Name: "a", Path: "p", Sha256: sum}}}
	}
	tests := []struct {
		name    string
		events  []*stagev1.RunEvent
		wantErr string
	}{
		{"no result", nil, "run ended without a result"},
		{"event after result", []*stagev1.RunEvent{result(`{}`), logWith("")}, "event after the result"},
		{"outputs not JSON", []*stagev1.RunEvent{result(`{"a":`)}, "outputs:"},
		{"outputs an array", []*stagev1.RunEvent{result(`[1]`)}, "want a JSON object, got array"},
		{"outputs huge int", []*stagev1.RunEvent{result(`{"a": 123456789012345678901234}`)}, "out of the int64 range"},
		{"log fields not an object", []*stagev1.RunEvent{logWith(`"x"`), result(`{}`)}, "log fields"},
		{"artifact bad sha", []*stagev1.RunEvent{artifact("xyz"), result(`{}`)}, `sha256 "xyz"`},
		{"artifact no path", []*stagev1.RunEvent{{Payload: &stagev1.RunEvent_Artifact{Artifact: &stagev1.Artifact{Name: "a"}}}, result(`{}`)}, "without a path"},
		{"step of a negative rank", []*stagev1.RunEvent{{Payload: &stagev1.RunEvent_Step{Step: &stagev1.Step{Rank: -1, GlobalStep: 3}}}, result(`{}`)}, "step of rank -1 at global step 3 of 0: negative numbers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) {
				stagev1.RegisterStageServer(s, &badServer{events: tt.events})
			})
			t.Cleanup(func() { conn.Close(); server.Stop() })
			gc := &RemoteStage{client: stagev1.NewStageClient(conn)}
			_, err := gc.Run(context.Background(), RunRequest{}, func(Event) {})
			if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want ErrBadReply containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestUnknownEventsAreSkipped(t *testing.T) {
	conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) {
		stagev1.RegisterStageServer(s, &badServer{events: []*stagev1.RunEvent{
			{Time: timestamppb.New(time.Unix(1, 0))}, // no payload
			{Payload: &stagev1.RunEvent_Log{Log: &stagev1.LogRecord{Level: stagev1.Level(99), Message: "odd level"}}},
			{Payload: &stagev1.RunEvent_Result{Result: &stagev1.Result{}}},
		}})
	})
	t.Cleanup(func() { conn.Close(); server.Stop() })
	gc := &RemoteStage{client: stagev1.NewStageClient(conn)}
	var got []Event
	outputs, err := gc.Run(context.Background(), RunRequest{}, func(e Event) { got = append(got, e) })
	if err != nil {
		t.Fatal(err)
	}
	if len(outputs) != 0 || len(got) != 1 || got[0].Log.Level != LevelInfo || got[0].Time.IsZero() {
		t.Errorf("outputs %v, events %+v", outputs, got)
	}
}

func TestFromStatus(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"unavailable", live, status.Error(codes.Unavailable, "connection refused"), ErrPluginExited},
		{"cancelled by the plugin side", live, status.Error(codes.Canceled, "closing"), ErrPluginExited},
		{"caller cancelled", cancelled, status.Error(codes.Canceled, "closing"), context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromStatus(tt.ctx, tt.err); !errors.Is(got, tt.want) {
				t.Errorf("fromStatus = %v, want %v", got, tt.want)
			}
		})
	}
	if got := fromStatus(live, status.Error(codes.Unknown, "disk full")); got.Error() != "disk full" {
		t.Errorf("unknown code: %v", got)
	}
}

func TestCheckDescriptor(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Descriptor)
		wantErr string
	}{
		{"ok", func(*Descriptor) {}, ""},
		{"bad name", func(d *Descriptor) { d.Name = "Bad Name" }, "invalid stage name"},
		{"no version", func(d *Descriptor) { d.Version = "" }, "empty version"},
		{"schema not JSON", func(d *Descriptor) { d.WithSchema = json.RawMessage("{") }, "not valid JSON"},
		{"schema a string", func(d *Descriptor) { d.WithSchema = json.RawMessage(`"x"`) }, "neither a JSON object nor a boolean"},
		{"bad output type", func(d *Descriptor) { d.Outputs[0].Type = "integer" }, `unknown type "integer"`},
		{"duplicate output", func(d *Descriptor) { d.Outputs[1].Name = "count" }, `"count" declared twice`},
		{"bad output name", func(d *Descriptor) { d.Outputs[0].Name = "a.b" }, `output name "a.b"`},
		{"other protocol", func(d *Descriptor) { d.ProtocolVersions = []int{2} }, "speaks protocol versions [2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := testDescriptor()
			tt.edit(&d)
			err := CheckDescriptor(d)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want ErrIncompatible containing %q", err, tt.wantErr)
			}
		})
	}
}
