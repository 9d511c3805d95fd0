package train_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/launch"
)

// TestStoppedOrHungRankIsNamedWithinTheTimeout stops rank 2 of a 4-device
// data parallel job with SIGSTOP after its third step, or makes it hang
// there. The other ranks' gradient AllReduce times out on it; the stage
// must fail naming rank 2 first, not the rank that happened to exit first.
// Before, the headline named whichever peer exited first, and the stage
// waited collective_timeout+5s more for rank 2 to exit, then the 5s grace
// period before SIGKILL: 5.2× a 3s timeout, 3.4× a 6s one.
//
// A stopped rank must end the stage within 1.2× collective_timeout of the
// SIGSTOP: the peers fail once it has been silent for the timeout, and
// nothing after that may wait for a process that cannot run. The bound is a
// property, not a speed. A hung rank's moment is less sharp (it is taken at
// its last line, and the peers' wait starts after a step of their own
// compute, which a loaded machine stretches), so it is held to the absence
// of a second wait: less than 2× the timeout, where the old PeerFailWait
// and grace period alone took the timeout plus 10s.
func TestStoppedOrHungRankIsNamedWithinTheTimeout(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to tell a stopped process")
	}
	for _, tc := range []struct {
		fault, env, headline, transport string
		bound                           float64 // × the timeout
	}{
		{"stopped", stopAtEnv, "rank failed: rank 2 (device 2) was stopped (SIGSTOP or a debugger)", "shm", 1.2},
		{"stopped", stopAtEnv, "rank failed: rank 2 (device 2) was stopped (SIGSTOP or a debugger)", "tcp", 1.2},
		{"hung", hangAtEnv, "rank failed: rank 2 (device 2) hung", "shm", 2},
	} {
		transport := tc.transport
		t.Run(tc.fault+"/"+transport, func(t *testing.T) {
			const devices, victim = 4, 2
			// Short, so that the test is quick, but long enough that
			// the 1.2× bound leaves 1.2s for what a loaded machine adds:
			// at load 20-25 on 2 cores a peer may read rank 2's last
			// heartbeat late (its silence counts from then), and four
			// processes must exit; up to 0.9s measured.
			timeout := 6 * time.Second
			dataDir := synthData(t, 24)
			with := withBlock(dataDir, map[string]any{
				"mode": "data_parallel", "epochs": 100, "log_steps": 1,
				"collective_timeout": timeout.String(), "collective_transport": transport,
			})
			jobDir := t.TempDir()
			t.Setenv(tc.env, strconv.Itoa(victim)+":epoch: 1 step: 3,")
			r := runStage(t.Context(), jobDir, devices, 1, with)
			end := time.Now()
			os.Unsetenv(tc.env)
			raw, err := os.ReadFile(filepath.Join(launch.DeviceDir(jobDir, victim), faultAtFile))
			if err != nil {
				t.Fatalf("rank %d was not %s (%v); the stage returned %v", victim, tc.fault, err, r.err)
			}
			ns, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if r.err == nil || !errors.Is(r.err, launch.ErrRankFailed) {
				t.Fatalf("stage returned %v, want a failed rank", r.err)
			}
			// The headline names rank 2, then quotes the first rank that
			// failed, whose collective blamed rank 2.
			if msg := r.err.Error(); !strings.HasPrefix(msg, tc.headline) || !strings.Contains(msg, "collective: allreduce: rank 2 (") || !strings.Contains(msg, "did not answer within 6s") {
				t.Errorf("stage error %q, want it to start with %q and quote a peer's collective blaming rank 2", msg, tc.headline)
			}
			// No rank blames another one (a rank may also have been
			// stopped by the launcher before its own collective failed).
			for rank := 0; rank < devices; rank++ {
				if rank == victim {
					continue
				}
				log, err := os.ReadFile(launch.LogPath(jobDir, rank))
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(string(log), "\n") {
					if strings.Contains(line, "did not answer") && !strings.Contains(line, "rank 2 (") {
						t.Errorf("train.log%d blames another rank than 2: %s", rank, line)
					}
				}
			}
			took := end.Sub(time.Unix(0, ns))
			if limit := time.Duration(tc.bound * float64(timeout)); took > limit {
				t.Errorf("the stage failed %v after rank 2 %s, want at most %v× the %v collective timeout (%v)", took.Round(time.Millisecond), tc.fault, tc.bound, timeout, limit)
			} else {
				t.Logf("the stage failed %v after rank 2 %s: %.200s", took.Round(time.Millisecond), tc.fault, r.err)
			}
		})
	}
}
