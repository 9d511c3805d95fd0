package train

import (
	"io"
	"time"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// relayEvents reads the ranks' event stream (npu/job) until EOF or a read
// error: steps become step events (and the lead rank's the loss metric),
// evaluations the eval_accuracy and eval_loss metrics,
// the lead rank's log lines log records. The lead is rank 0, or this
// host's lowest rank when rank 0 runs on another server. The error a rank
// failed with goes into failures (if not nil), by rank. Malformed lines
// are skipped with a warning. It returns the read error, nil at EOF.
func relayEvents(r io.Reader, sc sdk.Context, ranks, lead int, failures map[int]string) error {
	return relayWatched(r, sc, ranks, lead, failures, nil)
}

// jobWatch is what the elastic stage learns of a job from its event
// stream: when its first step ended (first, if not nil, is called then),
// the last global step it reached and when a rank first reported failing.
// Its fields are read once the relay has ended.
type jobWatch struct {
	first    func()
	started  bool
	lastStep int
	failedAt time.Time
}

// relayWatched is relayEvents, telling watch (if not nil) of the steps
// and failures it relays.
func relayWatched(r io.Reader, sc sdk.Context, ranks, lead int, failures map[int]string, watch *jobWatch) error {
	return job.ReadEvents(r, ranks, func(ev job.Event) {
		if watch != nil {
			switch {
			case ev.Kind == job.KindStep:
				watch.lastStep = max(watch.lastStep, int(ev.GlobalStep))
				if !watch.started {
					watch.started = true
					if watch.first != nil {
						watch.first()
					}
				}
			case ev.Kind == job.KindFailed && watch.failedAt.IsZero():
				watch.failedAt = time.Now()
			}
		}
		switch ev.Kind {
		case job.KindLog:
			if ev.Rank == lead {
				sc.Info(ev.Message)
			}
		case job.KindStep:
			if ev.Rank == lead {
				sc.Metric("loss", ev.Loss, ev.GlobalStep)
				if ev.SaveBlocked > 0 {
					sc.Metric("save_blocked_seconds", ev.SaveBlocked, ev.GlobalStep)
				}
			}
			sc.Step(plugins.StepEvent{
				Rank: ev.Rank, Epoch: ev.Epoch, Step: ev.Step, GlobalStep: ev.GlobalStep, TotalSteps: ev.TotalSteps,
				Loss: ev.Loss, LearningRate: ev.LearningRate, ImagesPerSecond: ev.ImagesPerSecond,
				DeviceMemory: ev.DeviceMemory, EpochEnd: ev.EpochEnd,
			})
		case job.KindEval:
			// Only rank 0 sends them. The metric's step is the global
			// step the evaluation followed: the loss curve's axis.
			sc.Metric(job.MetricEvalAccuracy, *ev.Accuracy, ev.GlobalStep)
			sc.Metric(job.MetricEvalLoss, ev.Loss, ev.GlobalStep)
		case job.KindFailed:
			if failures != nil {
				failures[ev.Rank] = ev.Message
			}
		}
	}, func(msg string) { sc.Warn(msg) })
}
