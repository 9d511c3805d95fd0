package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	stagev1 "github.com/mspipe/mspipe/plugins/proto/stage/v1"
)

// RemoteStage is the host side of the protocol: a [Stage] whose methods call
// a plugin over gRPC. It is what [GRPCPlugin] dispenses to the host. It only
// converts between Go values and messages; the host checks the replies
// against the descriptor ([CheckDescriptor], [CheckOutputs]).
type RemoteStage struct {
	client stagev1.StageClient
	exited <-chan struct{} // closed by go-plugin when the plugin process is gone
}

var _ Stage = (*RemoteStage)(nil)

// Exited is closed when the plugin process is gone.
func (c *RemoteStage) Exited() <-chan struct{} { return c.exited }

func (c *RemoteStage) Describe(ctx context.Context) (Descriptor, error) {
	resp, err := c.client.Describe(ctx, &stagev1.DescribeRequest{})
	if err != nil {
		return Descriptor{}, fromStatus(ctx, err)
	}
	return descriptorFromProto(resp), nil
}

func (c *RemoteStage) Validate(ctx context.Context, req ValidateRequest) ([]Problem, error) {
	data, err := encodeObject(req.With)
	if err != nil {
		return nil, fmt.Errorf("encode with: %w", err)
	}
	cluster, err := clusterToProto(req.Cluster)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Validate(ctx, &stagev1.ValidateRequest{With: data, Cluster: cluster, Unknown: req.Unknown})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	problems := make([]Problem, 0, len(resp.GetProblems()))
	for _, p := range resp.GetProblems() {
		problems = append(problems, Problem{Path: p.GetPath(), Message: p.GetMessage()})
	}
	return problems, nil
}

func (c *RemoteStage) Run(ctx context.Context, req RunRequest, emit func(Event)) (map[string]any, error) {
	pbReq, err := runRequestToProto(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if we return early
	stream, err := c.client.Run(ctx, pbReq)
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	var outputs map[string]any
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fromStatus(ctx, err)
		}
		if outputs != nil {
			return nil, fmt.Errorf("%w: event after the result", ErrBadReply)
		}
		if res, ok := ev.GetPayload().(*stagev1.RunEvent_Result); ok {
			outputs, err = DecodeJSONObject(res.Result.GetOutputs())
			if err != nil {
				return nil, fmt.Errorf("%w: outputs: %v", ErrBadReply, err)
			}
			continue
		}
		e, ok, err := eventFromProto(ev)
		if err != nil {
			return nil, err
		}
		if ok && emit != nil {
			emit(e)
		}
	}
	if outputs == nil {
		return nil, fmt.Errorf("%w: run ended without a result", ErrBadReply)
	}
	return outputs, nil
}

// fromStatus turns a gRPC error into the error the caller knows: its own
// ctx.Err() when it cancelled, ErrPluginExited when the connection went away,
// else the plugin's message.
func fromStatus(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled:
		return fmt.Errorf("%w: %s", ErrPluginExited, st.Message())
	case codes.ResourceExhausted:
		return fmt.Errorf("%w: %s (a message from a plugin may take at most %s; outputs at most %s: write large values to a file and output its path)",
			ErrBadReply, st.Message(), formatBytes(MaxMessageBytes), formatBytes(MaxOutputsBytes))
	case codes.Internal:
		if strings.Contains(st.Message(), "invalid UTF-8") {
			return fmt.Errorf("%w: %s (strings in the protocol's messages must be UTF-8: a log message, progress unit, metric or artifact name or path)", ErrBadReply, st.Message())
		}
	}
	return errors.New(st.Message())
}

// grpcServer is the plugin side of the protocol: it serves a [Stage].
type grpcServer struct {
	stagev1.UnimplementedStageServer
	impl Stage
}

func (s *grpcServer) Describe(ctx context.Context, _ *stagev1.DescribeRequest) (*stagev1.DescribeResponse, error) {
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return descriptorToProto(d), nil
}

func (s *grpcServer) Validate(ctx context.Context, req *stagev1.ValidateRequest) (*stagev1.ValidateResponse, error) {
	with, err := DecodeJSONObject(req.GetWith())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "decode with: %v", err)
	}
	problems, err := s.impl.Validate(ctx, ValidateRequest{With: with, Cluster: clusterFromProto(req.GetCluster()), Unknown: req.GetUnknown()})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &stagev1.ValidateResponse{Problems: make([]*stagev1.Problem, 0, len(problems))}
	for _, p := range problems {
		resp.Problems = append(resp.Problems, &stagev1.Problem{Path: validUTF8(p.Path), Message: validUTF8(p.Message)})
	}
	return resp, nil
}

func (s *grpcServer) Run(req *stagev1.RunRequest, stream grpc.ServerStreamingServer[stagev1.RunEvent]) error {
	r, err := runRequestFromProto(req)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	// gRPC streams do not allow concurrent Send, and nothing may be sent
	// once the handler has returned.
	var mu sync.Mutex
	finished := false
	emit := func(e Event) {
		msg := eventToProto(e)
		if msg == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			_ = stream.Send(msg) // a failed send means the host is gone; ctx says so
		}
	}
	outputs, err := s.impl.Run(stream.Context(), r, emit)
	mu.Lock()
	finished = true
	mu.Unlock()
	if err != nil {
		return toStatus(err)
	}
	data, err := encodeObject(outputs)
	if err != nil {
		return status.Errorf(codes.Internal, "encode outputs: %v", err)
	}
	return stream.Send(&stagev1.RunEvent{
		Time:    timestamppb.Now(),
		Payload: &stagev1.RunEvent_Result{Result: &stagev1.Result{Outputs: data}},
	})
}

// toStatus keeps a context error recognisable on the host; anything else
// travels as its message.
func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

func encodeObject(m map[string]any) ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return EncodeJSON(m)
}

func descriptorToProto(d Descriptor) *stagev1.DescribeResponse {
	resp := &stagev1.DescribeResponse{
		Name:        validUTF8(d.Name),
		Version:     validUTF8(d.Version),
		Description: validUTF8(d.Description),
		WithSchema:  d.WithSchema,
	}
	for _, o := range d.Outputs {
		resp.Outputs = append(resp.Outputs, &stagev1.OutputSpec{Name: validUTF8(o.Name), Type: validUTF8(o.Type), Description: validUTF8(o.Description)})
	}
	versions := d.ProtocolVersions
	if len(versions) == 0 {
		versions = []int{ProtocolVersion}
	}
	for _, v := range versions {
		resp.ProtocolVersions = append(resp.ProtocolVersions, int32(v))
	}
	return resp
}

func descriptorFromProto(resp *stagev1.DescribeResponse) Descriptor {
	d := Descriptor{
		Name:        resp.GetName(),
		Version:     resp.GetVersion(),
		Description: resp.GetDescription(),
		WithSchema:  resp.GetWithSchema(),
	}
	for _, o := range resp.GetOutputs() {
		d.Outputs = append(d.Outputs, OutputSpec{Name: o.GetName(), Type: o.GetType(), Description: o.GetDescription()})
	}
	for _, v := range resp.GetProtocolVersions() {
		d.ProtocolVersions = append(d.ProtocolVersions, int(v))
	}
	return d
}

func runRequestToProto(r RunRequest) (*stagev1.RunRequest, error) {
	with, err := encodeObject(r.With)
	if err != nil {
		return nil, fmt.Errorf("encode with: %w", err)
	}
	if r.Attempt < 0 || r.Attempt > math.MaxInt32 {
		return nil, fmt.Errorf("attempt %d out of range", r.Attempt)
	}
	cluster, err := clusterToProto(r.Cluster)
	if err != nil {
		return nil, err
	}
	return &stagev1.RunRequest{
		RunId:   r.RunID,
		StageId: r.StageID,
		With:    with,
		WorkDir: r.WorkDir,
		Cluster: cluster,
		Attempt: int32(r.Attempt),
		Env:     r.Env,
	}, nil
}

func runRequestFromProto(req *stagev1.RunRequest) (RunRequest, error) {
	with, err := DecodeJSONObject(req.GetWith())
	if err != nil {
		return RunRequest{}, fmt.Errorf("decode with: %w", err)
	}
	return RunRequest{
		RunID:   req.GetRunId(),
		StageID: req.GetStageId(),
		With:    with,
		WorkDir: req.GetWorkDir(),
		Cluster: clusterFromProto(req.GetCluster()),
		Attempt: int(req.GetAttempt()),
		Env:     req.GetEnv(),
	}, nil
}

func clusterToProto(c Cluster) (*stagev1.Cluster, error) {
	if c.Devices < 0 || c.Devices > math.MaxInt32 {
		return nil, fmt.Errorf("cluster devices %d out of range", c.Devices)
	}
	return &stagev1.Cluster{Devices: int32(c.Devices), RankTable: c.RankTable}, nil
}

// clusterFromProto reads a cluster, nil (an old host) as the zero Cluster.
func clusterFromProto(c *stagev1.Cluster) Cluster {
	return Cluster{Devices: int(c.GetDevices()), RankTable: c.GetRankTable()}
}

// MaxLogBytes bounds a log record's message and, apart, its encoded
// fields: a longer message is cut (and says so), longer fields are
// replaced by a note. Both sides apply it, so a plugin that does not use
// this package is bounded too.
const MaxLogBytes = 64 << 10

// eventToProto converts an event for sending; it returns nil for an event
// with no payload, which is dropped. Log fields that cannot be encoded are
// replaced by a note, since emit has no way to report an error. Strings
// that are not UTF-8 (which protobuf refuses to send, failing the whole
// stream) get U+FFFD for their bad bytes.
func eventToProto(e Event) *stagev1.RunEvent {
	t := e.Time
	if t.IsZero() {
		t = time.Now()
	}
	msg := &stagev1.RunEvent{Time: timestamppb.New(t)}
	switch {
	case e.Log != nil:
		rec := &stagev1.LogRecord{Level: levelToProto(e.Log.Level), Message: capLogMessage(validUTF8(e.Log.Message))}
		if len(e.Log.Fields) > 0 {
			data, err := EncodeJSON(e.Log.Fields)
			if err == nil && len(data) > MaxLogBytes {
				err = fmt.Errorf("%s of fields, at most %s", formatBytes(len(data)), formatBytes(MaxLogBytes))
			}
			if err != nil {
				data, _ = EncodeJSON(map[string]any{"fields_error": err.Error()})
			}
			rec.Fields = data
		}
		msg.Payload = &stagev1.RunEvent_Log{Log: rec}
	case e.Progress != nil:
		p := e.Progress
		msg.Payload = &stagev1.RunEvent_Progress{Progress: &stagev1.Progress{Done: p.Done, Total: p.Total,
			Unit: validUTF8(p.Unit), Message: capLogMessage(validUTF8(p.Message))}}
	case e.Metric != nil:
		m := e.Metric
		msg.Payload = &stagev1.RunEvent_Metric{Metric: &stagev1.Metric{Name: validUTF8(m.Name), Value: m.Value, Step: m.Step}}
	case e.Artifact != nil:
		a := e.Artifact
		msg.Payload = &stagev1.RunEvent_Artifact{Artifact: &stagev1.Artifact{Name: validUTF8(a.Name), Path: validUTF8(a.Path), Sha256: validUTF8(a.SHA256)}}
	case e.Step != nil:
		st := e.Step
		msg.Payload = &stagev1.RunEvent_Step{Step: &stagev1.Step{
			Rank: int32(st.Rank), Epoch: st.Epoch, Step: st.Step, GlobalStep: st.GlobalStep, TotalSteps: st.TotalSteps,
			Loss: st.Loss, LearningRate: st.LearningRate, ImagesPerSecond: st.ImagesPerSecond,
			DeviceMemory: st.DeviceMemory, EpochEnd: st.EpochEnd,
		}}
	default:
		return nil
	}
	return msg
}

// validUTF8 replaces each run of bytes that is not UTF-8 by U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// capLogMessage cuts a message to MaxLogBytes (on a rune boundary) and
// says how much was left out.
func capLogMessage(s string) string {
	if len(s) <= MaxLogBytes {
		return s
	}
	cut := MaxLogBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%s more cut: log messages are limited to %s)", s[:cut], formatBytes(len(s)-cut), formatBytes(MaxLogBytes))
}

// eventFromProto converts a received event. ok is false for an event
// without a payload the host knows (e.g. from a newer protocol minor), which
// is skipped; err is set for a payload that is malformed.
func eventFromProto(ev *stagev1.RunEvent) (e Event, ok bool, err error) {
	e.Time = time.Now()
	if ts := ev.GetTime(); ts != nil && ts.IsValid() {
		e.Time = ts.AsTime()
	}
	switch p := ev.GetPayload().(type) {
	case *stagev1.RunEvent_Log:
		rec := &LogEvent{Level: levelFromProto(p.Log.GetLevel()), Message: capLogMessage(p.Log.GetMessage())}
		if n := len(p.Log.GetFields()); n > MaxLogBytes {
			rec.Fields = map[string]any{"fields_error": fmt.Sprintf("%s of fields, at most %s", formatBytes(n), formatBytes(MaxLogBytes))}
		} else if n > 0 {
			rec.Fields, err = DecodeJSONObject(p.Log.GetFields())
			if err != nil {
				return e, false, fmt.Errorf("%w: log fields: %v", ErrBadReply, err)
			}
		}
		e.Log = rec
	case *stagev1.RunEvent_Progress:
		e.Progress = &ProgressEvent{Done: p.Progress.GetDone(), Total: p.Progress.GetTotal(), Unit: truncate(p.Progress.GetUnit(), 80), Message: capLogMessage(p.Progress.GetMessage())}
	case *stagev1.RunEvent_Metric:
		e.Metric = &MetricEvent{Name: p.Metric.GetName(), Value: p.Metric.GetValue(), Step: p.Metric.GetStep()}
	case *stagev1.RunEvent_Artifact:
		a := p.Artifact
		if a.GetPath() == "" {
			return e, false, fmt.Errorf("%w: artifact %q without a path", ErrBadReply, a.GetName())
		}
		if !isSHA256Hex(a.GetSha256()) {
			return e, false, fmt.Errorf("%w: artifact %q: sha256 %q is not 64 lower-case hex digits", ErrBadReply, a.GetName(), truncate(a.GetSha256(), 80))
		}
		e.Artifact = &ArtifactEvent{Name: a.GetName(), Path: a.GetPath(), SHA256: a.GetSha256()}
	case *stagev1.RunEvent_Step:
		st := p.Step
		if st.GetRank() < 0 || st.GetGlobalStep() < 0 || st.GetTotalSteps() < 0 {
			return e, false, fmt.Errorf("%w: step of rank %d at global step %d of %d: negative numbers", ErrBadReply, st.GetRank(), st.GetGlobalStep(), st.GetTotalSteps())
		}
		e.Step = &StepEvent{
			Rank: int(st.GetRank()), Epoch: st.GetEpoch(), Step: st.GetStep(), GlobalStep: st.GetGlobalStep(), TotalSteps: st.GetTotalSteps(),
			Loss: st.GetLoss(), LearningRate: st.GetLearningRate(), ImagesPerSecond: st.GetImagesPerSecond(),
			DeviceMemory: st.GetDeviceMemory(), EpochEnd: st.GetEpochEnd(),
		}
	default:
		return e, false, nil
	}
	return e, true, nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func levelToProto(l Level) stagev1.Level {
	switch l {
	case LevelDebug:
		return stagev1.Level_LEVEL_DEBUG
	case LevelWarn:
		return stagev1.Level_LEVEL_WARN
	case LevelError:
		return stagev1.Level_LEVEL_ERROR
	}
	return stagev1.Level_LEVEL_INFO
}

func levelFromProto(l stagev1.Level) Level {
	switch l {
	case stagev1.Level_LEVEL_DEBUG:
		return LevelDebug
	case stagev1.Level_LEVEL_WARN:
		return LevelWarn
	case stagev1.Level_LEVEL_ERROR:
		return LevelError
	}
	return LevelInfo
}
