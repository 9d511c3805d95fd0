package pipeline

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/rs/zerolog"
)

// onEvent forwards a plugin event to the events log, the stage log, the
// engine's logger (log records at info and above are console lines) and,
// for progress, the progress view. The steps of the lowest rank that
// reports are the stage's progress: rank 0's, or on a server of a
// multi-host job without rank 0, that server's first rank's.
func (r *runner) onEvent(sid string, ev plugins.Event, log io.Writer) {
	l := r.events.Info().Str("stage", sid)
	switch {
	case ev.Log != nil:
		// The record's level is the line's level; its fields must not
		// repeat the keys every line has.
		fields := pluginFields(ev.Log.Fields)
		r.events.WithLevel(logLevel(ev.Log.Level)).Str("stage", sid).Str("event", "log").Fields(fields).Msg(ev.Log.Message)
		text := ev.Log.Message
		if _, record := ev.Log.Fields[plugins.RecordField]; !record {
			text += formatFields(ev.Log.Fields)
		}
		fmt.Fprintf(log, "%s %s %s\n", ev.Time.Format(time.RFC3339), strings.ToUpper(ev.Log.Level.String()), text)
		r.log.WithLevel(logLevel(ev.Log.Level)).Str("event", "log").Str("stage", sid).Fields(fields).
			Msgf("[%s] %s", sid, text)
	case ev.Progress != nil:
		l.Str("event", "progress").Int64("done", ev.Progress.Done).Int64("total", ev.Progress.Total).Str("unit", ev.Progress.Unit).Msg(ev.Progress.Message)
		r.log.Debug().Str("event", "progress").Str("stage", sid).Int64("done", ev.Progress.Done).Int64("total", ev.Progress.Total).
			Str("unit", ev.Progress.Unit).Msgf("[%s] %s", sid, ev.Progress.Message)
		if r.e.Progress != nil {
			r.e.Progress.Progress(sid, *ev.Progress)
		}
	case ev.Metric != nil:
		l.Str("event", "metric").Str("name", ev.Metric.Name).Float64("value", ev.Metric.Value).Int64("step", ev.Metric.Step).Msg("metric")
		r.log.Debug().Str("event", "metric").Str("stage", sid).Str("name", ev.Metric.Name).Float64("value", ev.Metric.Value).
			Int64("step", ev.Metric.Step).Msgf("[%s] %s=%v", sid, ev.Metric.Name, ev.Metric.Value)
	case ev.Artifact != nil:
		l.Str("event", "artifact").Str("name", ev.Artifact.Name).Str("path", ev.Artifact.Path).Str("sha256", ev.Artifact.SHA256).Msg("artifact")
		r.log.Debug().Str("event", "artifact").Str("stage", sid).Str("name", ev.Artifact.Name).Str("path", ev.Artifact.Path).
			Str("sha256", ev.Artifact.SHA256).Msgf("[%s] artifact %s: %s", sid, ev.Artifact.Name, ev.Artifact.Path)
	case ev.Step != nil:
		st := ev.Step
		l.Str("event", "step").Int("rank", st.Rank).Int64("epoch", st.Epoch).Int64("step", st.Step).
			Int64("global_step", st.GlobalStep).Int64("total_steps", st.TotalSteps).Float64("loss", st.Loss).
			Float64("lr", st.LearningRate).Float64("images_per_second", st.ImagesPerSecond).
			Int64("after_step_device_memory", st.DeviceMemory).Bool("epoch_end", st.EpochEnd).Msg("step")
		r.log.Debug().Str("event", "step").Str("stage", sid).Int("rank", st.Rank).Int64("epoch", st.Epoch).Int64("step", st.Step).
			Int64("global_step", st.GlobalStep).Int64("total_steps", st.TotalSteps).Float64("loss", st.Loss).
			Msgf("[%s] rank %d epoch %d step %d loss %g", sid, st.Rank, st.Epoch, st.Step, st.Loss)
		if r.e.Progress != nil && r.leads(sid, st.Rank) {
			r.e.Progress.Progress(sid, st.Progress())
		}
	}
}

// reservedKeys are the keys the engine writes on every events line.
var reservedKeys = map[string]bool{"level": true, "run": true, "stage": true, "event": true, "time": true, "message": true, "error": true}

// pluginFields returns a log record's fields with those named like a
// reserved key renamed "field.<key>", so that no line has a key twice.
func pluginFields(fields map[string]any) map[string]any {
	clash := false
	for k := range fields {
		clash = clash || reservedKeys[k]
	}
	if !clash {
		return fields
	}
	out := make(map[string]any, len(fields))
	for k, v := range fields {
		if reservedKeys[k] {
			k = "field." + k
		}
		out[k] = v
	}
	return out
}

// leads reports whether rank's steps are stage sid's progress: it is the
// lowest rank of the stage seen so far.
func (r *runner) leads(sid string, rank int) bool {
	r.leadMu.Lock()
	defer r.leadMu.Unlock()
	if lead, ok := r.lead[sid]; ok && lead < rank {
		return false
	}
	r.lead[sid] = rank
	return true
}

// logLevel is the logger's level of a plugin log record.
func logLevel(l plugins.Level) zerolog.Level {
	switch {
	case l >= plugins.LevelError:
		return zerolog.ErrorLevel
	case l == plugins.LevelWarn:
		return zerolog.WarnLevel
	case l == plugins.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

// formatFields renders log fields as " key=value" in key order; the
// stream field of relayed stdout/stderr lines is left out as noise.
func formatFields(fields map[string]any) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != "stream" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, fields[k])
	}
	return b.String()
}
