// Command collective measures AllReduce between rank processes on loopback
// TCP beside the memcpy bandwidth of the same machine, and prints markdown
// tables.
//
//	go run ./bench/collective                      # 2, 4, 8 ranks; mesh and ring; 1 KiB … 256 MiB
//	go run ./bench/collective -ranks 8 -max 64MiB -profile /tmp/prof
//	go run ./bench/collective -ranks 8 -servers 2        # 2 simulated servers of 4 ranks
//
// For each rank count it starts that many processes (this program,
// re-executed), each inheriting its listening socket, and runs every size
// with every algorithm. A time is the median over at least three
// iterations of the slowest rank's time for that iteration; bandwidths
// follow nccl-tests: algbw = size / time, busbw = algbw × 2(n-1)/n. memcpy is Go's
// copy() of a buffer of the same size (best of five trials before the ranks
// start and five after they finish), measured in this process. Each rank first checks one AllReduce
// result exactly, then makes three untimed warm-up calls.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/collective"
)

const childEnv = "MSPIPE_BENCH_COLLECTIVE_CHILD"

// warmups is the number of untimed calls per size after the checked one.
const warmups = 3

// result is one size measured by one rank group, printed by rank 0 as JSON.
type result struct {
	Ranks     int     `json:"ranks"`
	Algorithm string  `json:"algorithm"`
	Bytes     int     `json:"bytes"`
	Iters     int     `json:"iters"`
	Seconds   float64 `json:"seconds"` // median iteration of the slowest rank
	CPU       float64 `json:"cpu"`     // CPU seconds per iteration, all ranks together
}

func main() {
	if os.Getenv(childEnv) == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "rank:", err)
			os.Exit(1)
		}
		return
	}
	if err := parent(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/collective:", err)
		os.Exit(1)
	}
}

type options struct {
	ranks   []int
	algs    []string
	sizes   []int
	budget  time.Duration
	profile string
	segment int
	sockbuf int
	servers int
}

func parseOptions() (options, error) {
	ranks := flag.String("ranks", "2,4,8", "comma-separated rank counts")
	algs := flag.String("algorithms", "shm,mesh,ring", "comma-separated algorithms: shm (shared memory, buffers from Comm.Alloc), mesh and ring (loopback TCP)")
	minSize := flag.String("min", "1KiB", "smallest buffer")
	maxSize := flag.String("max", "256MiB", "largest buffer (sizes grow by 4×)")
	budget := flag.Duration("budget", 300*time.Millisecond, "measuring time per size (at least one iteration)")
	profile := flag.String("profile", "", "directory for each rank's CPU profile")
	segment := flag.String("segment", "1MiB", "frame payload size (Config.SegmentBytes)")
	sockbuf := flag.Int("sockbuf", 0, "data socket buffer bytes (Config.SocketBuffer; 0 default, -1 kernel autotuning)")
	servers := flag.Int("servers", 1, "simulated servers the ranks are spread over (rank r on server r*servers/ranks): shm shares memory within a server, TCP between")
	flag.Parse()
	var o options
	for _, s := range strings.Split(*ranks, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > 64 {
			return o, fmt.Errorf("-ranks: %q is not a rank count from 2 to 64", s)
		}
		o.ranks = append(o.ranks, n)
	}
	for _, s := range strings.Split(*algs, ",") {
		if _, _, err := parseAlg(s); err != nil {
			return o, fmt.Errorf("-algorithms: %w", err)
		}
		o.algs = append(o.algs, s)
	}
	lo, err := parseSize(*minSize)
	if err != nil {
		return o, fmt.Errorf("-min: %w", err)
	}
	hi, err := parseSize(*maxSize)
	if err != nil {
		return o, fmt.Errorf("-max: %w", err)
	}
	for s := lo; s <= hi; s *= 4 {
		o.sizes = append(o.sizes, s)
	}
	if len(o.sizes) == 0 {
		return o, fmt.Errorf("-min %s is larger than -max %s", *minSize, *maxSize)
	}
	if o.segment, err = parseSize(*segment); err != nil {
		return o, fmt.Errorf("-segment: %w", err)
	}
	o.budget, o.profile, o.sockbuf, o.servers = *budget, *profile, *sockbuf, *servers
	for _, n := range o.ranks {
		if *servers < 1 || n%*servers != 0 {
			return o, fmt.Errorf("-servers %d does not divide %d ranks", *servers, n)
		}
	}
	return o, nil
}

// parseAlg maps a column name to the transport and algorithm it measures.
func parseAlg(s string) (collective.Transport, collective.Algorithm, error) {
	if s == "shm" {
		return collective.TransportShm, collective.Mesh, nil
	}
	alg, err := collective.ParseAlgorithm(s)
	return collective.TransportTCP, alg, err
}

// parseSize reads a buffer or frame size: a byte count (bytesize.Parse)
// that holds whole float32s.
func parseSize(text string) (int, error) {
	n, err := bytesize.Parse(text)
	if err != nil || n%4 != 0 || n > math.MaxInt {
		return 0, fmt.Errorf("%q is not a positive size in bytes, a multiple of 4 (like 1KiB, 64MiB)", text)
	}
	return int(n), nil
}

func parent() error {
	o, err := parseOptions()
	if err != nil {
		return err
	}
	started := time.Now()
	memcpy := make(map[int]float64)
	for _, size := range o.sizes {
		memcpy[size] = memcpyBandwidth(size, o.budget)
	}
	var results []result
	for _, n := range o.ranks {
		for _, alg := range o.algs {
			rs, err := runGroup(n, alg, o)
			if err != nil {
				return fmt.Errorf("%d ranks, %s: %w", n, alg, err)
			}
			results = append(results, rs...)
		}
	}
	// memcpy again after the ranks, keeping the better figure, so a busy
	// moment during one measurement cannot flatter the comparison.
	for _, size := range o.sizes {
		memcpy[size] = max(memcpy[size], memcpyBandwidth(size, o.budget))
	}
	printTables(o, results, memcpy)
	fmt.Printf("\nTimes are medians of the slowest rank's iteration time; CPU is the CPU time of all ranks per call (mean over\n"+
		"the timed calls); algbw = size/time, busbw = algbw × 2(n-1)/n; memcpy is the best of ten copy() trials, five before\n"+
		"the ranks run and five after. %d-core machine, GOMAXPROCS %d per process, load average %s; total run %v.\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAverage(), time.Since(started).Round(time.Second))
	return nil
}

// memcpyBandwidth times copy() between two touched buffers of size bytes
// and returns the best of five trials, so that a busy machine makes the
// comparison harder for AllReduce, not easier.
func memcpyBandwidth(size int, budget time.Duration) float64 {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := 0.0
	for range 5 {
		iters := 0
		start := time.Now()
		for iters == 0 || time.Since(start) < budget/10 {
			for range 1 + (1<<22)/size {
				copy(dst, src)
				iters++
			}
		}
		best = max(best, float64(iters)*float64(size)/time.Since(start).Seconds()/1e9)
	}
	return best
}

// runGroup starts n rank processes that measure every size with alg and
// returns rank 0's results.
func runGroup(n int, alg string, o options) ([]result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	secret, err := collective.NewSecret()
	if err != nil {
		return nil, err
	}
	files := make([]*os.File, n)
	addrs := make([]string, n)
	for r := range files {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[r] = ln.Addr().String()
		files[r], err = ln.(*net.TCPListener).File()
		ln.Close()
		if err != nil {
			return nil, err
		}
	}
	sizes := make([]string, len(o.sizes))
	for i, s := range o.sizes {
		sizes[i] = strconv.Itoa(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	var out *bufio.Scanner
	for r := range cmds {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), childEnv+"=1", "RANK="+strconv.Itoa(r), "ADDRS="+strings.Join(addrs, ","),
			"SECRET="+hex.EncodeToString(secret), "ALGORITHM="+alg, "SIZES="+strings.Join(sizes, ","),
			"BUDGET="+o.budget.String(), "PROFILE="+o.profile, "SEGMENT="+strconv.Itoa(o.segment), "SOCKBUF="+strconv.Itoa(o.sockbuf),
			"SERVERS="+strconv.Itoa(o.servers))
		cmd.ExtraFiles = []*os.File{files[r]}
		cmd.Stderr = os.Stderr
		if r == 0 {
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				return nil, err
			}
			out = bufio.NewScanner(stdout)
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		files[r].Close()
		cmds[r] = cmd
	}
	var results []result
	for out.Scan() {
		var res result
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			return nil, fmt.Errorf("rank 0 printed %q: %w", out.Text(), err)
		}
		fmt.Fprintf(os.Stderr, "%d ranks %s %s: median %.3g ms of %d, %.3g CPU-ms per call\n", n, alg, sizeName(res.Bytes), res.Seconds*1e3, res.Iters, res.CPU*1e3)
		results = append(results, res)
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
	if len(results) != len(o.sizes) {
		return nil, fmt.Errorf("rank 0 reported %d of %d sizes", len(results), len(o.sizes))
	}
	return results, nil
}

func child() (err error) {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	addrs := strings.Split(os.Getenv("ADDRS"), ",")
	secret, err := hex.DecodeString(os.Getenv("SECRET"))
	if err != nil {
		return err
	}
	name := os.Getenv("ALGORITHM")
	transport, alg, err := parseAlg(name)
	if err != nil {
		return err
	}
	budget, err := time.ParseDuration(os.Getenv("BUDGET"))
	if err != nil {
		return err
	}
	segment, err := strconv.Atoi(os.Getenv("SEGMENT"))
	if err != nil {
		return err
	}
	servers, err := strconv.Atoi(os.Getenv("SERVERS"))
	if err != nil {
		return err
	}
	hosts := make([]int, len(addrs))
	for r := range hosts {
		hosts[r] = r * servers / len(addrs)
	}
	sockbuf, err := strconv.Atoi(os.Getenv("SOCKBUF"))
	if err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(os.Getenv("SIZES"), ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		sizes = append(sizes, n)
	}
	if dir := os.Getenv("PROFILE"); dir != "" {
		var prof bytes.Buffer
		if err := pprof.StartCPUProfile(&prof); err != nil {
			return err
		}
		path := filepath.Join(dir, fmt.Sprintf("cpu-n%d-%s-rank%d.pprof", len(addrs), name, rank))
		defer func() {
			pprof.StopCPUProfile()
			if werr := atomicfile.WriteFile(path, prof.Bytes(), 0o644); werr != nil && err == nil {
				err = werr
			}
		}()
	}
	file := os.NewFile(3, "listener")
	ln, err := net.FileListener(file)
	file.Close()
	if err != nil {
		return err
	}
	ctx := context.Background()
	c, err := collective.Init(ctx, collective.Config{Rank: rank, Size: len(addrs), Addrs: addrs, Secret: secret,
		Timeout: time.Minute, Algorithm: alg, SegmentBytes: segment, SocketBuffer: sockbuf, Listener: ln, Hosts: hosts,
		Transport: transport})
	if err != nil {
		return err
	}
	defer c.Close()
	n := len(addrs)
	// Shared memory reduces buffers from Alloc in place, as the trainer's
	// gradients are; the TCP algorithms get ordinary memory.
	buf, err := c.Alloc(ctx, slices.Max(sizes)/4)
	if err != nil {
		return err
	}
	clear(buf) // touch every page before timing
	agreed := make([]float32, 1)
	for _, size := range sizes {
		b := buf[:size/4]
		// One checked call: ranks contribute rank+1, the sum is n(n+1)/2.
		for i := range b {
			b[i] = float32(rank + 1)
		}
		if err := c.AllReduce(ctx, b, collective.Sum); err != nil {
			return err
		}
		want := float32(n * (n + 1) / 2)
		for i, v := range b {
			if v != want {
				return fmt.Errorf("%d bytes: element %d = %v after AllReduce, want %v", size, i, v, want)
			}
		}
		clear(b)
		// Warm-up calls, as nccl-tests makes (its -w): the first touches
		// of another rank's memory are slow on this VM.
		var first time.Duration
		for range warmups {
			t0 := time.Now()
			if err := c.AllReduce(ctx, b, collective.Sum); err != nil {
				return err
			}
			first = time.Since(t0)
		}
		// Agree on the iteration count from the slowest first call.
		agreed[0] = float32(first.Seconds())
		if err := c.AllReduce(ctx, agreed, collective.Max); err != nil {
			return err
		}
		iters := max(3, min(2000, int(budget.Seconds()/float64(agreed[0]))))
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// Each rank times every iteration; the slowest rank's time per
		// iteration, then the median over iterations, resists the spikes
		// of a shared machine better than one total.
		times := make([]float32, iters)
		cpu0 := cpuTime()
		t0 := time.Now()
		for i := range times {
			if err := c.AllReduce(ctx, b, collective.Sum); err != nil {
				return err
			}
			now := time.Now()
			times[i] = float32(now.Sub(t0).Seconds())
			t0 = now
		}
		cpu := []float32{float32((cpuTime() - cpu0).Seconds())}
		if err := c.AllReduce(ctx, times, collective.Max); err != nil {
			return err
		}
		if err := c.AllReduce(ctx, cpu, collective.Sum); err != nil {
			return err
		}
		if rank == 0 {
			slices.Sort(times)
			line, _ := json.Marshal(result{Ranks: n, Algorithm: name, Bytes: size, Iters: iters, Seconds: float64(times[iters/2]),
				CPU: float64(cpu[0]) / float64(iters)})
			fmt.Println(string(line))
		}
	}
	return nil
}

func sizeName(b int) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return strconv.Itoa(b>>20) + " MiB"
	case b >= 1<<10 && b%(1<<10) == 0:
		return strconv.Itoa(b>>10) + " KiB"
	}
	return strconv.Itoa(b) + " B"
}

func printTables(o options, results []result, memcpy map[int]float64) {
	find := func(n int, alg string, size int) (result, bool) {
		for _, r := range results {
			if r.Ranks == n && r.Algorithm == alg && r.Bytes == size {
				return r, true
			}
		}
		return result{}, false
	}
	for _, n := range o.ranks {
		factor := 2 * float64(n-1) / float64(n)
		where := "shm = shared memory"
		if o.servers > 1 {
			where = fmt.Sprintf("%d servers of %d ranks, shm = shared memory within a server and TCP between", o.servers, n/o.servers)
		}
		fmt.Printf("\n### AllReduce (sum, float32), %d rank processes: %s, mesh and ring = loopback TCP\n\n", n, where)
		head, rule := "| size | memcpy GB/s |", "|---:|---:|"
		for _, alg := range o.algs {
			head += fmt.Sprintf(" %s time | %s CPU | %s algbw GB/s | %s busbw GB/s |", alg, alg, alg, alg)
			rule += "---:|---:|---:|---:|"
		}
		fmt.Println(head + " best busbw / memcpy |")
		fmt.Println(rule + "---:|")
		for _, size := range o.sizes {
			row := fmt.Sprintf("| %s | %.2f |", sizeName(size), memcpy[size])
			best := 0.0
			for _, alg := range o.algs {
				r, _ := find(n, alg, size)
				algbw := float64(size) / r.Seconds / 1e9
				best = max(best, algbw*factor)
				row += fmt.Sprintf(" %s | %s | %.3f | %.3f |", duration(r.Seconds), duration(r.CPU), algbw, algbw*factor)
			}
			fmt.Printf("%s %.1f%% |\n", row, 100*best/memcpy[size])
		}
	}
	const target = 64 << 20
	if !slices.Contains(o.ranks, 8) || !slices.Contains(o.sizes, target) {
		return
	}
	fmt.Printf("\nTarget (8 ranks, 64 MiB, busbw ≥ 50%% of memcpy %.2f GB/s):", memcpy[target])
	for _, alg := range o.algs {
		r, _ := find(8, alg, target)
		busbw := float64(target) / r.Seconds / 1e9 * 2 * 7 / 8
		verdict := "not met"
		if busbw >= 0.5*memcpy[target] {
			verdict = "met"
		}
		fmt.Printf(" %s %.3f GB/s = %.1f%% (%s);", alg, busbw, 100*busbw/memcpy[target], verdict)
	}
	fmt.Println()
}

func duration(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.2f s", s)
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "unknown"
// where /proc/loadavg cannot be read: the figures mean little without it
// on a shared machine.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
