package launch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins/sdk/sdktest"

	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/plugins"
	launchstage "github.com/mspipe/mspipe/stages/npu/launch"
)

// rankModeEnv makes the test binary act as the user's per-device command
// (the stage starts it through the list form of `command`, without a shell).
const rankModeEnv = "MSPIPE_LAUNCH_STAGE_TEST_RANK"

func TestMain(m *testing.M) {
	switch os.Getenv(rankModeEnv) {
	case "":
		os.Exit(m.Run())
	case "report":
		wd, _ := os.Getwd()
		fmt.Printf("args %q\n", os.Args[1:])
		fmt.Printf("cwd %s\n", wd)
		for _, k := range []string{"DEVICE_ID", "RANK_ID", "RANK_SIZE", "RANK_TABLE_FILE", "USER_VAR"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		os.Exit(0)
	}
	os.Exit(2)
}

func run(ctx context.Context, t *testing.T, cluster plugins.Cluster, with map[string]any) (string, map[string]any, []plugins.Event, error) {
	t.Helper()
	r := sdktest.Run(ctx, t, launchstage.New(), plugins.RunRequest{StageID: "launch", With: with, Cluster: cluster})
	return r.Request.WorkDir, r.Outputs, r.Events(), r.Err
}

func TestDescribe(t *testing.T) {
	d, err := launchstage.New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "npu/launch" || launchstage.Name != "npu/launch" || d.Version == "" {
		t.Errorf("descriptor %+v", d)
	}
	var got []string
	for _, o := range d.Outputs {
		got = append(got, o.Name+":"+o.Type)
	}
	if want := []string{"dir:path", "devices:int"}; !reflect.DeepEqual(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	for _, s := range []string{`"required":["command"]`, `"oneOf":[`, `"env":{`} {
		if !bytes.Contains(d.WithSchema, []byte(s)) {
			t.Errorf("schema lacks %s:\n%s", s, d.WithSchema)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"command": "python train.py"}, ""},
		{map[string]any{"command": []any{"python", "train.py"}, "env": map[string]any{"DATA_PATH": "/data"}}, ""},
		{map[string]any{"command": 3}, "command: want a string or a list of strings, got 3"},
		{map[string]any{"command": "x", "env": map[string]any{"N": 1}}, "/env: want string, got number"},
		{map[string]any{"command": "x", "shell": true}, `unknown field "shell"`},
	}
	for _, tc := range cases {
		problems, err := launchstage.New().Validate(context.Background(), plugins.ValidateRequest{With: tc.with})
		if err != nil {
			t.Fatalf("%v: %v", tc.with, err)
		}
		if got := plugins.JoinProblems(problems); got != tc.want {
			t.Errorf("%v: problems %q, want %q", tc.with, got, tc.want)
		}
	}
}

// TestLaunchSeedsLayout runs the test binary as a 4-device job and checks
// what the seeds' run.sh gives every device: its own device{i}/ working
// directory, env{i}.log, train.log{i} with the command's output, and
// DEVICE_ID, RANK_ID, RANK_SIZE and RANK_TABLE_FILE — the last naming a rank
// table the stage wrote for the local devices.
func TestLaunchSeedsLayout(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	arg := "two words and $HOME"
	work, out, events, err := run(context.Background(), t, plugins.Cluster{Devices: 4}, map[string]any{
		"command": []any{self, "-test.run=^$", arg},
		"env":     map[string]any{rankModeEnv: "report", "USER_VAR": "from the spec"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"dir": work, "devices": 4}; !reflect.DeepEqual(out, want) {
		t.Errorf("outputs %v, want %v", out, want)
	}
	table := filepath.Join(work, "rank_table_4pcs.json")
	rt, problems, err := ranktable.Load(table)
	if err != nil || len(problems) > 0 {
		t.Fatalf("rank table: %v %v", err, problems)
	}
	if ranks, err := rt.Ranks(); err != nil || len(ranks) != 4 {
		t.Errorf("rank table has %d ranks (%v), want 4", len(ranks), err)
	}
	for i := range 4 {
		dir := filepath.Join(work, fmt.Sprintf("device%d", i))
		log, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("train.log%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("args [\"-test.run=^$\" %q]\ncwd %s\nDEVICE_ID=%d\nRANK_ID=%d\nRANK_SIZE=4\nRANK_TABLE_FILE=%s\nUSER_VAR=from the spec\n",
			arg, dir, i, i, table)
		if string(log) != want {
			t.Errorf("train.log%d:\n%s\nwant:\n%s", i, log, want)
		}
		env, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("env%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(env), "\n")
		for _, kv := range []string{
			fmt.Sprintf("DEVICE_ID=%d", i), fmt.Sprintf("RANK_ID=%d", i), "RANK_SIZE=4", "RANK_TABLE_FILE=" + table,
			"USER_VAR=from the spec",
		} {
			if !contains(lines, kv) {
				t.Errorf("env%d.log lacks %s", i, kv)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(work, "device4")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device4/ exists for a 4-device job: %v", err)
	}
	var logs []string
	for _, e := range events {
		if e.Log != nil {
			logs = append(logs, e.Log.Message)
		}
	}
	if want := []string{"starting 4 device process(es)"}; !reflect.DeepEqual(logs, want) {
		t.Errorf("logs %q, want %q", logs, want)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// TestLaunchGivenRankTable: a cluster with a rank table passes that file
// (absolute) to every device and writes none; the string form of command
// runs through /bin/sh.
func TestLaunchGivenRankTable(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "rank_table_2pcs.json")
	if err := os.WriteFile(table, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	work, out, _, err := run(context.Background(), t, plugins.Cluster{Devices: 2, RankTable: table}, map[string]any{
		"command": `echo "$RANK_ID/$DEVICE_ID/$RANK_SIZE $RANK_TABLE_FILE" > seen`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if out["devices"] != 2 {
		t.Errorf("outputs %v", out)
	}
	for i := range 2 {
		b, err := os.ReadFile(filepath.Join(launch.DeviceDir(work, i), "seen"))
		if want := fmt.Sprintf("%d/%d/2 %s\n", i, i, table); err != nil || string(b) != want {
			t.Errorf("device%d saw %q (%v), want %q", i, b, err, want)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(work, "rank_table_*.json")); len(matches) != 0 {
		t.Errorf("the stage wrote %v although the cluster has a rank table", matches)
	}

	// No devices in the request means one.
	work, out, _, err = run(context.Background(), t, plugins.Cluster{}, map[string]any{"command": "echo $RANK_SIZE > seen"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "device0", "seen")); out["devices"] != 1 || string(b) != "1\n" {
		t.Errorf("no devices: outputs %v, RANK_SIZE %q", out, b)
	}
}

func TestLaunchFailures(t *testing.T) {
	// Rank 1 fails; the others, asleep, are stopped, and the error names
	// rank 1 and quotes its log.
	_, out, _, err := run(context.Background(), t, plugins.Cluster{Devices: 4}, map[string]any{
		"command": `if [ "$RANK_ID" = 1 ]; then echo "no data on device $DEVICE_ID"; exit 3; fi; exec sleep 60`,
	})
	if want := "rank failed: rank 1 (device 1) exit status 3: no data on device 1"; !errors.Is(err, launch.ErrRankFailed) || err.Error() != want {
		t.Errorf("outputs %v, error %v; want %q", out, err, want)
	}

	_, _, _, err = run(context.Background(), t, plugins.Cluster{Devices: 1}, map[string]any{"command": []any{"mspipe-no-such-command"}})
	if want := `command: exec: "mspipe-no-such-command": executable file not found in $PATH`; err == nil || err.Error() != want {
		t.Errorf("unknown command: %v, want %q", err, want)
	}

	_, _, _, err = run(context.Background(), t, plugins.Cluster{Devices: 3}, map[string]any{"command": "true"})
	if err == nil || !strings.HasPrefix(err.Error(), "generate a rank table for 3 devices: ") {
		t.Errorf("3 devices: %v, want the rank table's refusal", err)
	}

	// Cancelling stops every device.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, _, _, err = run(ctx, t, plugins.Cluster{Devices: 2}, map[string]any{"command": "exec sleep 60"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
