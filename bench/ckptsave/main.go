// Command ckptsave measures what saving a checkpoint after every step
// (save_checkpoint_steps: 1) costs a ResNet-20 training: the same steps
// with saving off, with synchronous saves and with async_save, side by
// side, in rotating order over several rounds.
//
// Each of -devices ranks is a stand_alone trainer (npu/trainer) in this
// process, with its own checkpoint directory and its own compute threads,
// all training at once: every rank writes a checkpoint every step on the
// same disk, as the ranks of a data parallel job do, but without the
// gradient AllReduce (which async_save does not change). The data is a
// synthetic CIFAR-10 set in a temporary directory, removed at the end with
// the checkpoints.
//
//	go run ./bench/ckptsave                       # 2 ranks, 8 timed steps, 3 rounds
//	go run ./bench/ckptsave -devices 4 -steps 6 -rounds 2
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/trainer"
)

func main() {
	devices := flag.Int("devices", 2, "ranks training at once, each saving every step")
	steps := flag.Int("steps", 8, "timed steps per rank (after 2 warm-up steps)")
	rounds := flag.Int("rounds", 3, "rounds; the three modes run once per round, in rotating order")
	batch := flag.Int("batch", 32, "batch size per rank")
	flag.Parse()
	if err := run(*devices, *steps, *rounds, *batch); err != nil {
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

// measured is one round of one mode: every rank's timed step times and the
// time its saves held it up.
type measured struct {
	steps, blocked []time.Duration
	staging        int64
}

const warmup = 2

func run(devices, steps, rounds, batch int) error {
	if devices < 1 || steps < 1 || rounds < 1 || batch < 1 {
		return fmt.Errorf("-devices, -steps, -rounds and -batch must be positive")
	}
	tmp, err := os.MkdirTemp("", "mspipe-bench-ckptsave-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dataDir := filepath.Join(tmp, "data")
	// Enough images for warmup+steps steps of every rank's shard.
	perFile := (warmup + steps) * batch * devices / data.NumTrainFiles
	if err := data.WriteSynthetic(context.Background(), dataDir, data.SynthConfig{Seed: 1, TrainPerBatch: perFile + 1, TestRecords: 10}); err != nil {
		return err
	}
	threads := max(runtime.NumCPU()/devices, 1)
	results := map[string][]measured{}
	for r := 0; r < rounds; r++ {
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			got, err := runMode(m, filepath.Join(tmp, fmt.Sprintf("%s-%d", m.name, r)), dataDir, devices, steps, batch, threads)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", m.name, r+1, err)
			}
			results[m.name] = append(results[m.name], got)
		}
	}
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("ResNet-20, batch %d per rank, %d rank(s) at once with %d thread(s) each, save_checkpoint_steps 1, %d timed steps after %d warm-up, %d round(s); %s, %d CPUs, load average %s\n\n",
		batch, devices, threads, steps, warmup, rounds, host, runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Println("| saving | median step | vs off | median time blocked on saving | staging peak/rank | every round's median step |")
	fmt.Println("|---|---:|---:|---:|---:|---|")
	off := 0.0
	for _, m := range modes {
		var all, blocked []time.Duration
		var rounds []string
		var staging int64
		for _, got := range results[m.name] {
			all = append(all, got.steps...)
			blocked = append(blocked, got.blocked...)
			rounds = append(rounds, ms(median(got.steps)))
			staging = max(staging, got.staging)
		}
		med := median(all)
		if m.name == "off" {
			off = float64(med)
		}
		fmt.Printf("| %s | %s | %+.1f%% | %s | %.1f MiB | %s |\n", m.name, ms(med), 100*(float64(med)/off-1), ms(median(blocked)), float64(staging)/(1<<20), strings.Join(rounds, ", "))
	}
	return nil
}

// runMode trains every rank warmup+steps steps at once in mode m.
func runMode(m mode, dir, dataDir string, devices, steps, batch, threads int) (measured, error) {
	var mu sync.Mutex
	var out measured
	errs := make([]error, devices)
	var wg sync.WaitGroup
	for rank := 0; rank < devices; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := trainer.Config{
				DataDir: dataDir, Model: "resnet20", BatchSize: batch, Seed: 1, Threads: threads,
				NumShards: devices, ShardID: rank, MaxSteps: warmup + steps, NoAugment: true,
			}
			if m.save {
				cfg.CkptDir, cfg.SaveCheckpointSteps, cfg.AsyncSave = filepath.Join(dir, fmt.Sprintf("ckpt_%d", rank)), 1, m.async
			}
			last, n := time.Now(), 0
			var mine, blocked []time.Duration
			cfg.OnStep = func(s trainer.StepInfo) {
				now := time.Now()
				if n++; n > warmup {
					mine = append(mine, now.Sub(last))
					if m.save {
						blocked = append(blocked, s.SaveBlocked)
					}
				}
				last = now
			}
			res, err := trainer.Train(context.Background(), cfg)
			errs[rank] = err
			mu.Lock()
			out.steps = append(out.steps, mine...)
			out.blocked = append(out.blocked, blocked...)
			if res != nil {
				out.staging = max(out.staging, res.PeakSaveStaging)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			return out, fmt.Errorf("rank %d: %w", rank, err)
		}
	}
	return out, nil
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
