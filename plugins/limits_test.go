package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// One log line that is not UTF-8 must not fail the stage (protobuf
// refuses to marshal it, which used to end the stream with "string field
// contains invalid UTF-8" and no field named): its bad bytes arrive as
// U+FFFD, and so do those of the other event strings.
func TestProtocolInvalidUTF8Events(t *testing.T) {
	fake := &fakeStage{run: func(_ context.Context, _ RunRequest, emit func(Event)) (map[string]any, error) {
		emit(Event{Log: &LogEvent{Level: LevelInfo, Message: "bad \xff\xfe byte", Fields: map[string]any{"k": "v\xff"}}})
		emit(Event{Progress: &ProgressEvent{Done: 1, Total: 2, Unit: "st\xffep", Message: "m\xc3"}})
		emit(Event{Metric: &MetricEvent{Name: "lo\xffss", Value: 1}})
		return map[string]any{"s": "x"}, nil
	}}
	var got []Event
	outputs, err := inProcess(t, fake).Run(context.Background(), RunRequest{}, func(e Event) { got = append(got, e) })
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if outputs["s"] != "x" || len(got) != 3 {
		t.Fatalf("outputs %v, %d events", outputs, len(got))
	}
	if m := got[0].Log.Message; m != "bad \uFFFD byte" {
		t.Errorf("log message %q", m)
	}
	if f := got[0].Log.Fields["k"]; f != "v\uFFFD" {
		t.Errorf("log field %q", f)
	}
	if p := got[1].Progress; p.Unit != "st\uFFFDep" || p.Message != "m\uFFFD" {
		t.Errorf("progress %+v", p)
	}
	if n := got[2].Metric.Name; n != "lo\uFFFDss" {
		t.Errorf("metric name %q", n)
	}
}

// A log line of 1 MiB arrives cut to MaxLogBytes with a note; fields
// larger than that are replaced by a note.
func TestProtocolLogLinesCapped(t *testing.T) {
	long := strings.Repeat("é", 1<<19) // 1 MiB, two bytes a rune
	fake := &fakeStage{run: func(_ context.Context, _ RunRequest, emit func(Event)) (map[string]any, error) {
		emit(Event{Log: &LogEvent{Level: LevelInfo, Message: long, Fields: map[string]any{"big": long}}})
		return nil, nil
	}}
	var got []Event
	if _, err := inProcess(t, fake).Run(context.Background(), RunRequest{}, func(e Event) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d events", len(got))
	}
	m := got[0].Log.Message
	if len(m) > MaxLogBytes+200 || !utf8.ValidString(m) || !strings.HasSuffix(m, "more cut: log messages are limited to 64.0 KiB)") {
		t.Errorf("message of %d bytes ending %q", len(m), m[max(0, len(m)-80):])
	}
	if f := got[0].Log.Fields; len(f) != 1 || !strings.Contains(f["fields_error"].(string), "at most 64.0 KiB") {
		t.Errorf("fields %.200v", f)
	}
}

// Outputs are bounded in number and size, with the output named and the
// way out said; a message larger than the host takes is a clear error.
func TestCheckOutputSize(t *testing.T) {
	d := Descriptor{Name: "big/out", Outputs: []OutputSpec{{Name: WildcardOutput, Type: TypeAny}}}
	_, err := CheckOutputs(d, "", map[string]any{"blob": strings.Repeat("x", 100<<20), "n": int64(1)})
	if !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), `output "blob" (a string) is more than 1.0 MiB of JSON`) ||
		!strings.Contains(err.Error(), "write large values to a file and output its path") {
		t.Errorf("100 MiB string: %v", err)
	}
	many := map[string]any{}
	for i := range 300 {
		many[strings.Repeat("a", i+1)] = int64(i)
	}
	if _, err := CheckOutputs(d, "", many); !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), "300 outputs, a stage may have at most 256") {
		t.Errorf("300 outputs: %v", err)
	}
	// Escaping counts: 200,000 '<' are 1.2 MB of JSON (\u003c each).
	if err := CheckOutputSize(map[string]any{"s": strings.Repeat("<", 200000)}); err == nil {
		t.Error("200,000 '<' passed")
	}
	split := map[string]any{"a": strings.Repeat("x", 600<<10), "b": []any{strings.Repeat("y", 600<<10)}}
	if err := CheckOutputSize(split); err == nil || !strings.Contains(err.Error(), "the outputs take 1.2 MiB of JSON together") {
		t.Errorf("two outputs of 600 KiB: %v", err)
	}
	if err := CheckOutputSize(map[string]any{"m": map[string]any{"k": strings.Repeat("z", 900<<10)}}); err != nil {
		t.Errorf("900 KiB: %v", err)
	}
	big := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (104857700 vs. 16777216)")
	if err := fromStatus(context.Background(), big); !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "at most 16.0 MiB") {
		t.Errorf("resource exhausted: %v", err)
	}
	utf := status.Error(codes.Internal, "grpc: failed to unmarshal the received message: string field contains invalid UTF-8")
	if err := fromStatus(context.Background(), utf); !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "a log message, progress unit") {
		t.Errorf("invalid UTF-8: %v", err)
	}
}
