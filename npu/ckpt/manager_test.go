package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"
)

func touch(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func TestResolvePrefix(t *testing.T) {
	tests := []struct {
		name   string
		files  []string
		prefix string
		want   string
	}{
		{"empty dir", nil, "CKP", "CKP"},
		{"prefix taken", []string{"CKP-1_32.ckpt"}, "CKP", "CKP_1"},
		{"renamed series taken too", []string{"CKP-1_32.ckpt", "CKP_1-2_32.ckpt"}, "CKP", "CKP_2"},
		{"highest suffix wins", []string{"CKP_7-1_1.ckpt", "CKP_2-1_1.ckpt"}, "CKP", "CKP_8"},
		{"letter after prefix is another prefix", []string{"CKPX-1_1.ckpt", "CKP_a-1_1.ckpt"}, "CKP", "CKP"},
		{"only .ckpt files count", []string{"CKP-1_1.ckpt.tmp", "CKP-graph.meta", "CKP-1_1.txt"}, "CKP", "CKP"},
		{"breakpoint files do not count", []string{"CKP-1_1_breakpoint.ckpt"}, "CKP", "CKP"},
		{"no dash: no rename", []string{"CKP.ckpt", "CKP_3.ckpt"}, "CKP", "CKP"},
		{"non-numeric middle ignored", []string{"CKP_x1-1_1.ckpt", "CKP__-1_1.ckpt"}, "CKP", "CKP"},
		{"another prefix untouched", []string{"resnet-1_1.ckpt"}, "CKP", "CKP"},
		{"seed example", []string{"CKP-4_32.ckpt"}, "CKP", "CKP_1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			touch(t, dir, tc.files...)
			got, err := ResolvePrefix(dir, tc.prefix)
			if err != nil || got != tc.want {
				t.Fatalf("ResolvePrefix = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if got, err := ResolvePrefix(filepath.Join(t.TempDir(), "missing"), "CKP"); err != nil || got != "CKP" {
		t.Fatalf("missing dir: %q, %v; want CKP", got, err)
	}
}

func params(t *testing.T, v float32) func() ([]Tensor, error) {
	return func() ([]Tensor, error) {
		w, err := NewFloat32("w", []int64{1}, []float32{v})
		return []Tensor{w}, err
	}
}

func TestModelCheckpointNamingAndSchedule(t *testing.T) {
	dir := t.TempDir()
	mc, err := NewModelCheckpoint("", dir, CheckpointConfig{SaveCheckpointSteps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if mc.Prefix() != "CKP" {
		t.Fatalf("default prefix = %q, want CKP", mc.Prefix())
	}
	// 2 epochs of 4 steps: saves at global steps 3 and 6, then End at 8.
	var saved []string
	for step := 1; step <= 8; step++ {
		epoch := (step-1)/4 + 1
		p, err := mc.StepEnd(epoch, step, 4, params(t, float32(step)))
		if err != nil {
			t.Fatal(err)
		}
		if p != "" {
			saved = append(saved, filepath.Base(p))
		}
	}
	p, err := mc.End(2, 8, 4, params(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	saved = append(saved, filepath.Base(p))
	if want := []string{"CKP-1_3.ckpt", "CKP-2_2.ckpt", "CKP-2_4.ckpt"}; !reflect.DeepEqual(saved, want) {
		t.Fatalf("saved %v, want %v", saved, want)
	}
	if p, _ := mc.End(2, 8, 4, params(t, 8)); p != "" {
		t.Fatalf("End right after saving the same step wrote %s again", p)
	}
	got, err := Read(mc.Latest())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got[0].Float32s(); v[0] != 8 {
		t.Fatalf("latest checkpoint holds %v, want the step-8 parameters", v)
	}

	// A second run in the same directory moves on to CKP_1, as MindSpore does.
	mc2, err := NewModelCheckpoint("CKP", dir, CheckpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if mc2.Prefix() != "CKP_1" {
		t.Fatalf("second run prefix = %q, want CKP_1", mc2.Prefix())
	}
	if p, _ := mc2.StepEnd(1, 1, 4, params(t, 1)); filepath.Base(p) != "CKP_1-1_1.ckpt" {
		t.Fatalf("second run wrote %q, want CKP_1-1_1.ckpt", p)
	}
	latest, err := Latest(dir, "CKP")
	if err != nil || filepath.Base(latest) != "CKP_1-1_1.ckpt" {
		t.Fatalf("Latest = %q, %v; want the renamed series' file", latest, err)
	}

	// Resuming with ReusePrefix continues the CKP series and its schedule.
	mc3, err := NewModelCheckpoint("CKP", dir, CheckpointConfig{SaveCheckpointSteps: 3, ReusePrefix: true})
	if err != nil {
		t.Fatal(err)
	}
	mc3.ResumeAt(6)
	if p, _ := mc3.StepEnd(2, 7, 4, params(t, 7)); p != "" {
		t.Fatalf("resumed run saved at step 7: %s; next save is due at 9", p)
	}
	if p, _ := mc3.StepEnd(3, 9, 4, params(t, 9)); filepath.Base(p) != "CKP-3_1.ckpt" {
		t.Fatalf("resumed run wrote %q at step 9, want CKP-3_1.ckpt", p)
	}
}

func TestKeepCheckpointMax(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, "other-1_1.ckpt", "notes.txt")
	mc, err := NewModelCheckpoint("net", dir, CheckpointConfig{KeepCheckpointMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 5; step++ {
		if _, err := mc.StepEnd(1, step, 10, params(t, float32(step))); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"net-1_4.ckpt", "net-1_5.ckpt", "notes.txt", "other-1_1.ckpt"}
	if got := dirNames(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("directory = %v, want %v", got, want)
	}
}

func TestKeepCheckpointMaxDefaultAndOldestByTime(t *testing.T) {
	dir := t.TempDir()
	mc, err := NewModelCheckpoint("CKP", dir, CheckpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 5; step++ {
		if _, err := mc.StepEnd(1, step, 100, params(t, 0)); err != nil {
			t.Fatal(err)
		}
	}
	// Make step 3 the oldest file by time: MindSpore deletes by mtime.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "CKP-1_3.ckpt"), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.StepEnd(1, 6, 100, params(t, 0)); err != nil {
		t.Fatal(err)
	}
	want := []string{"CKP-1_1.ckpt", "CKP-1_2.ckpt", "CKP-1_4.ckpt", "CKP-1_5.ckpt", "CKP-1_6.ckpt"}
	if got := dirNames(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("default keep_checkpoint_max 5: directory = %v, want %v", got, want)
	}
}

func TestListCheckpointsFollowsCheckpointManager(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, "CKP-1_2.ckpt", "CKP-1_10.ckpt", "CKP-2_1.ckpt", "CKP-1_1_bak.ckpt", "CKP_1-1_1.ckpt", "CKP-1_1.txt", "CKPa-1_1.ckpt")
	same := time.Now().Add(-time.Minute)
	for _, n := range []string{"CKP-1_2.ckpt", "CKP-1_10.ckpt", "CKP-2_1.ckpt"} {
		if err := os.Chtimes(filepath.Join(dir, n), same, same); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []string {
		files, err := ListCheckpoints(dir, "CKP")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			names = append(names, filepath.Base(f.Path))
		}
		return names
	}
	// Equal times fall back to epoch/step order (numeric: 2 before 10).
	if got, want := list(), []string{"CKP-1_2.ckpt", "CKP-1_10.ckpt", "CKP-2_1.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	older := same.Add(-time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "CKP-2_1.ckpt"), older, older); err != nil {
		t.Fatal(err)
	}
	if got, want := list(), []string{"CKP-2_1.ckpt", "CKP-1_2.ckpt", "CKP-1_10.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("listed %v, want the oldest by time first: %v", got, want)
	}
}

func TestLatest(t *testing.T) {
	dir := t.TempDir()
	if _, err := Latest(dir, "CKP"); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty dir: err = %v, want ErrNoCheckpoint", err)
	}
	touch(t, dir, "CKP-1_9.ckpt", "CKP-2_1.ckpt", "CKP-10_1.ckpt", "other-99_1.ckpt", "CKP-3_x.ckpt")
	if got, _ := Latest(dir, "CKP"); filepath.Base(got) != "CKP-10_1.ckpt" {
		t.Fatalf("Latest = %s, want CKP-10_1.ckpt (numeric, not string, order)", got)
	}
	touch(t, dir, "CKP_2-1_1.ckpt", "CKP_10-1_1.ckpt")
	if got, _ := Latest(dir, ""); filepath.Base(got) != "CKP_10-1_1.ckpt" {
		t.Fatalf("Latest = %s, want CKP_10-1_1.ckpt (newest renamed series)", got)
	}
}

func TestModelCheckpointRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		prefix string
		cfg    CheckpointConfig
	}{
		{"a/b", CheckpointConfig{}},
		{"CKP", CheckpointConfig{SaveCheckpointSteps: -1}},
		{"CKP", CheckpointConfig{KeepCheckpointMax: -2}},
	} {
		if _, err := NewModelCheckpoint(tc.prefix, dir, tc.cfg); err == nil {
			t.Fatalf("NewModelCheckpoint(%q, %+v) accepted", tc.prefix, tc.cfg)
		}
	}
	mc, _ := NewModelCheckpoint("CKP", dir, CheckpointConfig{})
	if _, err := mc.StepEnd(1, 0, 4, params(t, 0)); err == nil {
		t.Fatal("step 0 accepted")
	}
	boom := errors.New("boom")
	if _, err := mc.StepEnd(1, 1, 4, func() ([]Tensor, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("params error = %v, want boom", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("failed saves left %v", names)
	}
}

func TestParseFileName(t *testing.T) {
	for _, tc := range []struct {
		name        string
		prefix      string
		epoch, step int
		ok          bool
	}{
		{"CKP-1_32.ckpt", "CKP", 1, 32, true},
		{"CKP-Integrated_1-4_32.ckpt", "CKP-Integrated_1", 4, 32, true},
		{"CKP_1-4_32.ckpt", "CKP_1", 4, 32, true},
		{"CKP-4_32.ckpt.tmp", "", 0, 0, false},
		{"CKP-4.ckpt", "", 0, 0, false},
		{"CKP-a_1.ckpt", "", 0, 0, false},
		{"CKP-1_-1.ckpt", "", 0, 0, false},
	} {
		p, e, s, ok := ParseFileName(tc.name)
		if p != tc.prefix || e != tc.epoch || s != tc.step || ok != tc.ok {
			t.Fatalf("ParseFileName(%q) = %q %d %d %v, want %q %d %d %v", tc.name, p, e, s, ok, tc.prefix, tc.epoch, tc.step, tc.ok)
		}
	}
}

// A save killed before its rename leaves a temporary file: the next
// ModelCheckpoint of the series removes it (it holds a checkpoint's worth
// of disk), and leaves other series' files and everything else alone.
func TestModelCheckpointRemovesKilledSaves(t *testing.T) {
	dir := t.TempDir()
	killed := []string{".CKP-1_10.ckpt.tmp-123", ".CKP_2-3_5.ckpt.tmp-4", ".CKP-1_4_breakpoint.ckpt.tmp-7"}
	kept := []string{".OTHER-1_10.ckpt.tmp-5", ".CKP_x-1_1.ckpt.tmp-6", "CKP-1_5.ckpt", "notes.txt"}
	for _, name := range append(slices.Clone(killed), kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewModelCheckpoint("", dir, CheckpointConfig{ReusePrefix: true}); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := slices.Clone(kept)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
