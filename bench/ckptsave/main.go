// Command ckptsave measures what saving a checkpoint after every step
// (save_checkpoint_steps: 1) costs a data parallel ResNet-20 training on 8
// devices: the same job with saving off, with synchronous saves and with
// async_save, side by side, in rotating order over several rounds.
//
// Each run is `mspipe run` of a generated spec with one npu/train stage:
// -devices rank processes joined by the gradient AllReduce (shared memory),
// every rank saving its checkpoint and sidecar digest in its own directory,
// as the stage does in production. The figures come from what the run
// leaves: the step events of events.jsonl (each rank's throughput over the
// epoch so far after each step, from which the step times follow), the
// lead rank's save_blocked_seconds metric (the time each save held its
// step up), and every rank's result.json (time blocked in all, the
// staging buffer's peak, the process's peak resident memory and CPU time:
// the CPU time saving adds is what it takes from training on a machine
// whose cores are all busy, a figure the load of other processes moves
// much less than the step time). The data is a
// synthetic CIFAR-10 set in a temporary directory, removed at the end with
// the runs.
//
//	go run ./bench/ckptsave                                # the full form: batch 32, 12 timed steps, 3 rounds
//	go run ./bench/ckptsave -batch 8 -steps 6 -rounds 2    # the quick form
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
)

func main() {
	devices := flag.Int("devices", 8, "rank processes of the data parallel job")
	steps := flag.Int("steps", 12, "timed steps per run (after -warmup steps)")
	warmup := flag.Int("warmup", 2, "steps left out of the step times (first touches of the buffers)")
	rounds := flag.Int("rounds", 3, "rounds; the three modes run once per round, in rotating order")
	batch := flag.Int("batch", 32, "batch size per device")
	mspipe := flag.String("mspipe", "", "the mspipe binary to run (default: go build ./cmd/mspipe into the temporary directory; run from the module's root)")
	flag.Parse()
	if err := run(*devices, *steps, *warmup, *rounds, *batch, *mspipe); err != nil {
		fmt.Fprintln(os.Stderr, "bench/ckptsave:", err)
		os.Exit(1)
	}
}

// mode is one way of saving.
type mode struct {
	name  string
	save  bool
	async bool
}

var modes = []mode{{"off", false, false}, {"sync", true, false}, {"async_save", true, true}}

// measured is one run: every rank's timed step times, rank 0's time
// blocked on saving per timed step, and each rank's result.
type measured struct {
	steps, blocked []time.Duration
	results        []job.Result
	sliceBytes     int64 // rank 0's last checkpoint file, 0 without saving
	wall           time.Duration
}

func run(devices, steps, warmup, rounds, batch int, mspipe string) error {
	if devices < 1 || steps < 1 || warmup < 0 || rounds < 1 || batch < 1 {
		return errors.New("-devices, -steps, -rounds and -batch must be positive, -warmup not negative")
	}
	tmp, err := os.MkdirTemp("", "mspipe-bench-ckptsave-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if mspipe == "" {
		mspipe = filepath.Join(tmp, "mspipe")
		build := exec.Command("go", "build", "-o", mspipe, "./cmd/mspipe")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/mspipe: %w", err)
		}
	}
	// One epoch of exactly warmup+steps+1 steps on every rank. The stage
	// always saves at the end of an epoch (MindSpore's default, the
	// stage's checkpoint output), so the last step is left out of every
	// mode's figures: "off" then saves nothing in the timed steps.
	dataDir := filepath.Join(tmp, "data")
	synth := data.SynthConfig{Seed: 1, TestRecords: 10}.SynthTrain((warmup + steps + 1) * batch * devices)
	if err := data.WriteSynthetic(context.Background(), dataDir, synth); err != nil {
		return err
	}
	loadBefore := loadAverage()
	results := map[string][]measured{}
	for r := 0; r < rounds; r++ {
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			dir := filepath.Join(tmp, fmt.Sprintf("%s-%d", m.name, r))
			got, err := runMode(m, mspipe, dir, dataDir, devices, warmup, steps, batch)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", m.name, r+1, err)
			}
			if n := devices * steps; len(got.steps) != n {
				return fmt.Errorf("%s, round %d: %d timed step events, want %d (%d ranks × %d steps)", m.name, r+1, len(got.steps), n, devices, steps)
			}
			fmt.Fprintf(os.Stderr, "round %d, %s: median step %s, run %s\n", r+1, m.name, ms(median(got.steps)), got.wall.Round(time.Second))
			results[m.name] = append(results[m.name], got)
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		}
	}
	fmt.Printf("ResNet-20, data_parallel on %d devices (rank processes, gradient AllReduce through shared memory), batch %d per device, save_checkpoint_steps 1 (keep_checkpoint_max 5); %d timed steps after %d warm-up (and the epoch's last step, left out), %d round(s) in rotating order\n",
		devices, batch, steps, warmup, rounds)
	fmt.Printf("CPU: %s, %d logical CPUs; load average before %s, after %s\n\n", cpuName(), runtime.NumCPU(), loadBefore, loadAverage())
	fmt.Println("| saving | median step | vs off | rank 0 blocked on saving, median per step | blocked per save, all ranks (mean) | CPU per rank and step (mean) | vs off | staging peak/rank | checkpoint file/rank | peak RSS/rank (median) | vs off in the same round (median of rounds) | every round's median step |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	var off time.Duration
	var offCPU float64
	for _, m := range modes {
		var all, blocked, roundMedians []time.Duration
		var staging, slice int64
		var rss []int64
		blockedSum, saves := 0.0, 0
		cpuSum, ranSteps := 0.0, 0
		for _, got := range results[m.name] {
			all = append(all, got.steps...)
			blocked = append(blocked, got.blocked...)
			roundMedians = append(roundMedians, median(got.steps))
			slice = max(slice, got.sliceBytes)
			for _, res := range got.results {
				staging = max(staging, res.PeakSaveStaging)
				rss = append(rss, res.PeakHostMemory)
				cpuSum += res.CPUSeconds
				ranSteps += warmup + steps + 1
				if m.save {
					blockedSum += res.SaveBlocked
					saves += warmup + steps + 1
				}
			}
		}
		med := median(all)
		cpu := cpuSum / float64(ranSteps)
		if m.name == "off" {
			off, offCPU = med, cpu
		}
		perSave := 0.0
		if saves > 0 {
			perSave = blockedSum / float64(saves)
		}
		slices.Sort(rss)
		var rounds []string
		var ratios []float64
		for r, d := range roundMedians {
			rounds = append(rounds, ms(d))
			// The rounds run the modes back to back, so a ratio within a
			// round cancels what drifts between rounds (other tenants,
			// clock), which the pooled median does not.
			ratios = append(ratios, float64(d)/float64(median(results["off"][r].steps)))
		}
		slices.Sort(ratios)
		paired := ratios[len(ratios)/2]
		if len(ratios)%2 == 0 {
			paired = (ratios[len(ratios)/2-1] + paired) / 2
		}
		fmt.Printf("| %s | %s | %+.1f%% | %s | %.1f ms | %.1f ms | %+.1f%% | %s | %s | %s | %+.1f%% | %s |\n", m.name, ms(med), 100*(float64(med)/float64(off)-1),
			ms(median(blocked)), 1000*perSave, 1000*cpu, 100*(cpu/offCPU-1), mib(staging), mib(slice), mib(rss[len(rss)/2]), 100*(paired-1), strings.Join(rounds, ", "))
	}
	return nil
}

// spec is the pipeline each run runs: one npu/train stage.
const spec = `version: 1
name: bench-ckptsave
cluster: {devices: %d}
stages:
  train:
    uses: npu/train
    with:
      data: %q
      model: resnet20
      mode: data_parallel
      gradients_mean: true
      batch_size: %d
      epochs: 1
      eval: false
      log_steps: 1000
%s`

// runMode runs the job once in mode m under dir and reads what it left.
func runMode(m mode, mspipe, dir, dataDir string, devices, warmup, steps, batch int) (measured, error) {
	var out measured
	saving := ""
	if m.save {
		saving = fmt.Sprintf("      save_checkpoint_steps: 1\n      async_save: %v\n", m.async)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return out, err
	}
	specPath := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(specPath, fmt.Appendf(nil, spec, devices, dataDir, batch, saving), 0o644); err != nil {
		return out, err
	}
	runsDir := filepath.Join(dir, "runs")
	cmd := exec.Command(mspipe, "run", specPath, "--no-cache", "--no-progress", "--runs-dir", runsDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return out, fmt.Errorf("mspipe run: %w\n%s", err, tail(stderr.String(), 20))
	}
	out.wall = time.Since(began)
	runDir := filepath.Join(runsDir, strings.TrimSpace(stdout.String()))
	times, blocked, err := readEvents(filepath.Join(runDir, "events.jsonl"), batch)
	if err != nil {
		return out, err
	}
	for rank := 0; rank < devices; rank++ {
		if n := len(times[rank]); n != warmup+steps+1 {
			return out, fmt.Errorf("rank %d: %d step events, want %d", rank, n, warmup+steps+1)
		}
		out.steps = append(out.steps, times[rank][warmup:warmup+steps]...)
		res, err := job.ReadResult(launch.DeviceDir(filepath.Join(runDir, "stages", "train"), rank))
		if err != nil {
			return out, fmt.Errorf("rank %d: %w", rank, err)
		}
		out.results = append(out.results, res)
		if m.save {
			// Every rank's last checkpoint must be complete and verified.
			if _, err := ckpt.ReadVerified(res.Checkpoint); err != nil {
				return out, fmt.Errorf("rank %d: %w", rank, err)
			}
			if rank == 0 {
				info, err := os.Stat(res.Checkpoint)
				if err != nil {
					return out, err
				}
				out.sliceBytes = info.Size()
			}
		}
	}
	for step, d := range blocked {
		if step > warmup && step <= warmup+steps {
			out.blocked = append(out.blocked, d)
		}
	}
	return out, nil
}

// event is the part of an events.jsonl line the bench reads.
type event struct {
	Stage        string  `json:"stage"`
	Event        string  `json:"event"`
	Rank         int     `json:"rank"`
	Step         int     `json:"step"`
	ImagesPerSec float64 `json:"images_per_second"`
	Name         string  `json:"name"`
	Value        float64 `json:"value"`
}

// readEvents returns each rank's step times, in order, and rank 0's time
// blocked on saving by global step. A step event carries the rank's
// throughput over the epoch so far (images_per_second = k·batch / T_k, T_k
// the time from the epoch's start to the end of step k, its save
// included), so step k took T_k − T_{k−1}.
func readEvents(path string, batch int) (map[int][]time.Duration, map[int]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	ends := map[int]map[int]float64{} // rank → step → T_k in seconds
	blocked := map[int]time.Duration{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Stage != "train" {
			continue
		}
		switch {
		case ev.Event == "step" && ev.ImagesPerSec > 0:
			if ends[ev.Rank] == nil {
				ends[ev.Rank] = map[int]float64{}
			}
			ends[ev.Rank][ev.Step] = float64(ev.Step*batch) / ev.ImagesPerSec
		case ev.Event == "metric" && ev.Name == "save_blocked_seconds":
			blocked[ev.Step] = time.Duration(ev.Value * float64(time.Second))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	steps := map[int][]time.Duration{}
	for rank, byStep := range ends {
		prev := 0.0
		for k := 1; k <= len(byStep); k++ {
			t, ok := byStep[k]
			if !ok {
				return nil, nil, fmt.Errorf("%s: rank %d has no event of step %d", path, rank, k)
			}
			steps[rank] = append(steps[rank], time.Duration((t-prev)*float64(time.Second)))
			prev = t
		}
	}
	return steps, blocked, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// cpuName is the first model name in /proc/cpuinfo and which of AVX2 and
// AVX-512 its flags list.
func cpuName() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	name, flags := runtime.GOARCH, ""
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k = strings.TrimSpace(k); {
		case !ok:
		case k == "model name" && name == runtime.GOARCH:
			name = strings.TrimSpace(v)
		case k == "flags" && flags == "":
			f := strings.Fields(v)
			flags = "no AVX2"
			if slices.Contains(f, "avx2") {
				flags = "AVX2"
			}
			if slices.Contains(f, "avx512f") {
				flags += ", AVX-512"
			} else {
				flags += ", no AVX-512"
			}
		}
	}
	return name + " (" + flags + ")"
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
