package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/tensor"
)

// rankEnv carries a rank process's job, as JSON.
const rankEnv = "MSPIPE_BENCH_PARALLEL_RANK"

// rankJob is what every rank process of one measurement does.
type rankJob struct {
	Kind      string // "train" or "probe"
	Model     string
	Mode      parallel.Mode
	Strategy  parallel.Strategy
	Devices   int
	Rank      int
	Batch     int // per device
	Steps     int
	Transport string
	Addrs     []string
	Secret    []byte
	Detail    bool
}

// rankResult is what a rank process reports.
type rankResult struct {
	Steps, Comms []time.Duration // timed steps (train)
	// Of Comms, the wait for the last peer to enter each call (Skews),
	// then for the peers to stage their data (Stagings), then for this
	// rank to run again (Wakes): see timedComm.
	Skews, Stagings, Wakes []time.Duration
	CPUs                   []time.Duration // the process's CPU time in each timed step
	Peak                   int64           // peak device memory (train)
	Probes                 []time.Duration // per probe, the time of one call (probe)
}

// spawn runs j on j.Devices rank processes (this program re-executed, each
// inheriting its listening socket), as npu/train runs a job's ranks, and
// returns each rank's result.
func spawn(j rankJob) ([]rankResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if j.Secret, err = collective.NewSecret(); err != nil {
		return nil, err
	}
	files := make([]*os.File, j.Devices)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	j.Addrs = make([]string, j.Devices)
	for r := range files {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		j.Addrs[r] = ln.Addr().String()
		files[r], err = ln.(*net.TCPListener).File()
		ln.Close()
		if err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, j.Devices)
	cmds := make([]*exec.Cmd, j.Devices)
	for r := range cmds {
		j.Rank = r
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), rankEnv+"="+string(b))
		cmd.ExtraFiles = []*os.File{files[r]}
		cmd.Stdout, cmd.Stderr = &outs[r], os.Stderr
		if err := cmd.Start(); err != nil {
			cancel()
			for _, c := range cmds[:r] {
				c.Wait()
			}
			return nil, err
		}
		cmds[r] = cmd
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res := make([]rankResult, j.Devices)
	for r := range res {
		if err := json.Unmarshal(outs[r].Bytes(), &res[r]); err != nil {
			return nil, fmt.Errorf("rank %d printed %q: %w", r, outs[r].String(), err)
		}
	}
	return res, nil
}

// rankMain is a rank process: it joins the job and runs its part.
func rankMain(spec string) error {
	var j rankJob
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		return err
	}
	tr, err := collective.ParseTransport(j.Transport)
	if err != nil {
		return err
	}
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return err
	}
	comm, err := collective.Init(context.Background(), collective.Config{
		Rank: j.Rank, Size: j.Devices, Addrs: j.Addrs, Secret: j.Secret, Timeout: 2 * time.Minute, Listener: ln, Transport: tr,
	})
	if err != nil {
		return err
	}
	defer comm.Close()
	var res rankResult
	switch j.Kind {
	case "train":
		err = trainRank(j, comm, &res)
	case "probe":
		res.Probes, err = probeRank(j, comm)
	default:
		err = fmt.Errorf("unknown job %q", j.Kind)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// measured is what measure returns: rank 0's median step, and the medians
// of its time in collectives and of that the waits timedComm tells apart;
// the median over steps of the CPU time all ranks used in a step divided
// by rank 0's step (the cores the job got: with 8 ranks on 2 cores a rank
// that waits for the others is mostly waiting for a core); the largest
// peak device memory of any rank.
type measured struct {
	step, comm, skew, staging, wake time.Duration
	cores                           float64
	peak                            int64
}

// measure trains devices rank processes for 2+steps steps and returns
// what it measured.
func measure(model string, mode parallel.Mode, strategy parallel.Strategy, devices, batch, steps int, tr collective.Transport) (measured, error) {
	res, err := spawn(rankJob{Kind: "train", Model: model, Mode: mode, Strategy: strategy, Devices: devices, Batch: batch, Steps: steps, Transport: tr.String(), Detail: detail})
	if err != nil {
		return measured{}, err
	}
	if detail {
		fmt.Fprintf(os.Stderr, "  %s, each rank's median step / in collectives / waiting for the last peer to enter:", mode)
		for r, rr := range res {
			fmt.Fprintf(os.Stderr, " %d: %.1f / %.1f / %.1f ms;", r, ms(median(rr.Steps)), ms(median(rr.Comms)), ms(median(rr.Skews)))
		}
		fmt.Fprintln(os.Stderr)
	}
	m := measured{step: median(res[0].Steps), comm: median(res[0].Comms), skew: median(res[0].Skews), staging: median(res[0].Stagings), wake: median(res[0].Wakes)}
	cores := make([]float64, len(res[0].Steps))
	for i, step := range res[0].Steps {
		var cpu time.Duration
		for _, r := range res {
			if i < len(r.CPUs) {
				cpu += r.CPUs[i]
			}
		}
		cores[i] = cpu.Seconds() / step.Seconds()
	}
	slices.Sort(cores)
	if len(cores) > 0 {
		m.cores = cores[len(cores)/2]
	}
	for _, r := range res {
		m.peak = max(m.peak, r.Peak)
	}
	return m, nil
}

// trainRank trains rank j.Rank: one compute thread, a random batch of
// j.Batch images, Momentum, 2 warm-up steps then j.Steps timed ones.
func trainRank(j rankJob, c *collective.Comm, res *rankResult) error {
	tc := &timedComm{Comm: c}
	net, err := shard.New(shard.Config{
		Model: j.Model, Mode: j.Mode, Strategy: j.Strategy, Devices: j.Devices, Rank: j.Rank, Comm: tc,
		BatchPerDevice: j.Batch, GradientsMean: true, Seed: 1, Threads: 1,
	})
	if err != nil {
		return err
	}
	defer net.Close()
	var trainable []*nn.Param
	for _, p := range net.Params() {
		if p.Trainable {
			trainable = append(trainable, p)
		}
	}
	opt, err := optim.NewMomentum(trainable, optim.MomentumConfig{LearningRates: []float32{0.01}, Momentum: 0.9})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(j.Rank), 7))
	x, err := tensor.New(j.Batch, 3, 32, 32)
	if err != nil {
		return err
	}
	for i := range x.Data() {
		x.Data()[i] = float32(rng.NormFloat64())
	}
	labels := make([]int32, j.Batch)
	for i := range labels {
		labels[i] = int32(rng.IntN(10))
	}
	for s := 0; s < 2+j.Steps; s++ {
		before, skewBefore, stagingBefore, wakeBefore := tc.spent.Load(), tc.skew.Load(), tc.staging.Load(), tc.wake.Load()
		tc.keep, tc.events = j.Detail && j.Rank == 0 && s == 1+j.Steps, tc.events[:0]
		cpu, began := processCPU(), time.Now()
		if _, err := net.TrainStep(context.Background(), x, labels); err != nil {
			return err
		}
		optBegan := time.Now()
		opt.Step()
		if tc.keep {
			fmt.Fprintf(os.Stderr, "  %s rank 0, last step: train %.2f ms, optimizer %.2f ms\n", j.Mode, ms(optBegan.Sub(began)), ms(time.Since(optBegan)))
			for _, e := range tc.events {
				fmt.Fprintf(os.Stderr, "    %-10s %10d elements %8.3f ms (last peer entered %.3f, then staged %.3f, then this rank ran %.3f)\n", e.kind, e.elems, ms(e.d), ms(e.skew), ms(e.staging), ms(e.wake))
			}
		}
		if s >= 2 {
			res.Steps = append(res.Steps, time.Since(began))
			res.Comms = append(res.Comms, time.Duration(tc.spent.Load()-before))
			res.Skews = append(res.Skews, time.Duration(tc.skew.Load()-skewBefore))
			res.Stagings = append(res.Stagings, time.Duration(tc.staging.Load()-stagingBefore))
			res.Wakes = append(res.Wakes, time.Duration(tc.wake.Load()-wakeBefore))
			res.CPUs = append(res.CPUs, processCPU()-cpu)
		}
	}
	_, res.Peak = net.Device().MemoryInUse()
	return nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
