package prepare_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins/sdk/sdktest"

	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/stages/cifar/prepare"
)

func run(t *testing.T, with map[string]any) (string, map[string]any, []plugins.Event, error) {
	t.Helper()
	r := sdktest.Run(context.Background(), t, prepare.New(), plugins.RunRequest{StageID: "prepare", With: with, Cluster: plugins.Cluster{Devices: 3}})
	return r.Request.WorkDir, r.Outputs, r.Events(), r.Err
}

func TestDescribe(t *testing.T) {
	d, err := prepare.New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "cifar/prepare" || prepare.Name != "cifar/prepare" || d.Version == "" || d.Description == "" {
		t.Errorf("descriptor %+v", d)
	}
	var got []string
	for _, o := range d.Outputs {
		got = append(got, o.Name+":"+o.Type)
	}
	want := []string{"dir:path", "root:path", "manifest:path", "train_count:int", "test_count:int", "shards:int"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	for _, s := range []string{`"shards":{`, `"maximum":4096`, `"minimum":10`, `"maximum":250000`, `"default":"synthetic"`} {
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
		{map[string]any{}, ""},
		{map[string]any{"source": "synthetic", "shards": 8, "seed": 3, "train_images": 100, "test_images": 20}, ""},
		{map[string]any{"source": "/data/cifar-10-batches-bin", "shards": 8}, ""},
		{map[string]any{"source": "/data/cifar-10-batches-bin", "train_images": 100},
			"/train_images: train_images and test_images apply to source: synthetic only"},
		{map[string]any{"source": "/data/cifar-10-batches-bin", "test_images": 100},
			"/train_images: train_images and test_images apply to source: synthetic only"},
		{map[string]any{"shards": "eight"}, "/shards: want int, got string"},
		{map[string]any{"num_shards": 8}, `unknown field "num_shards"`},
	}
	for _, tc := range cases {
		problems, err := prepare.New().Validate(context.Background(), plugins.ValidateRequest{With: tc.with})
		if err != nil {
			t.Fatalf("%v: %v", tc.with, err)
		}
		if got := plugins.JoinProblems(problems); got != tc.want {
			t.Errorf("%v: problems %q, want %q", tc.with, got, tc.want)
		}
	}
}

// TestPrepareSynthetic runs the stage for 3 shards of 52 requested training
// images (rounded down to 5 files of 10) and 20 test images, and checks every
// file it wrote against the outputs, the manifest and the sharding rule.
func TestPrepareSynthetic(t *testing.T) {
	work, out, events, err := run(t, map[string]any{"shards": 3, "seed": 4, "train_images": 50, "test_images": 20})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(work, "data")
	dir := filepath.Join(root, "cifar-10-batches-bin")
	manifest := filepath.Join(root, "manifest.json")
	want := map[string]any{"dir": dir, "root": root, "manifest": manifest, "train_count": 50, "test_count": 20, "shards": 3}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("outputs %v, want %v", out, want)
	}
	for name, records := range map[string]int{
		"data_batch_1.bin": 10, "data_batch_2.bin": 10, "data_batch_3.bin": 10, "data_batch_4.bin": 10, "data_batch_5.bin": 10,
		"test_batch.bin": 20,
	} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() != int64(records*data.RecordBytes) {
			t.Errorf("%s: %v, want %d records", name, err, records)
		}
	}
	m, err := data.Verify(root)
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != "synthetic" || m.Generator == nil || m.Generator.Config != (data.SynthConfig{Seed: 4, TrainPerBatch: 10, TestRecords: 20}) {
		t.Errorf("manifest source %q generator %+v", m.Source, m.Generator)
	}
	if m.Train.Records != 50 || m.Test.Records != 20 {
		t.Errorf("manifest counts %d and %d, want 50 and 20", m.Train.Records, m.Test.Records)
	}
	if m.Train.ClassHistogram != [data.NumClasses]int{5, 5, 5, 5, 5, 5, 5, 5, 5, 5} {
		t.Errorf("train histogram %v, want 5 of each class", m.Train.ClassHistogram)
	}

	// MindSpore's sampler: shard k reads records k, k+3, k+6, ... and the
	// last shards wrap around to fill ceil(n/3) places.
	train, err := data.ReadDir(dir, data.SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	if m.Shards == nil || m.Shards.NumShards != 3 || len(m.Shards.Shards) != 3 {
		t.Fatalf("manifest shards %+v", m.Shards)
	}
	for k, e := range m.Shards.Shards {
		wantPadded := 0
		if k == 2 {
			wantPadded = 1 // 3·17 = 51 places for 50 records; 3·7 = 21 for 20
		}
		if e.TrainRecords != 17 || e.TestRecords != 7 || e.TrainPadded != wantPadded || e.TestPadded != wantPadded {
			t.Errorf("shard %d: %+v", k, e)
		}
		b, err := os.ReadFile(filepath.Join(root, "shards", data.ShardFileName(data.SplitTrain, k, 3)))
		if err != nil {
			t.Fatal(err)
		}
		var wantBytes []byte
		for c := range 17 {
			wantBytes = append(wantBytes, train.Record((3*c+k)%50)...)
		}
		if !bytes.Equal(b, wantBytes) {
			t.Errorf("shard %d's train file is not records %d, %d, ... of the training set", k, k, k+3)
		}
	}

	var logs []string
	var artifacts []plugins.ArtifactEvent
	for _, e := range events {
		switch {
		case e.Log != nil:
			logs = append(logs, e.Log.Message)
		case e.Artifact != nil:
			artifacts = append(artifacts, *e.Artifact)
		}
	}
	wantLogs := []string{"preparing CIFAR-10", "wrote 50 training and 20 test images in 3 shards to " + root}
	if !reflect.DeepEqual(logs, wantLogs) {
		t.Errorf("logs %q, want %q", logs, wantLogs)
	}
	mb, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(mb)
	if len(artifacts) != 1 || artifacts[0].Name != "manifest" || artifacts[0].Path != manifest || artifacts[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("artifacts %+v, want the manifest with sha256 %x", artifacts, sum)
	}
}

// TestPrepareSeedAndDefaults: the same seed gives the same bytes, another
// seed other bytes; without shards and seed the stage writes one shard from
// seed 1.
// TestPrepareWritesTheCountAskedFor: 1024 images (not a multiple of the
// five data_batch files) are 1024 images, the first four files one larger,
// so 8 shards of 128 need no padding.
func TestPrepareWritesTheCountAskedFor(t *testing.T) {
	work, out, _, err := run(t, map[string]any{"shards": 8, "train_images": 1024, "test_images": 16})
	if err != nil {
		t.Fatal(err)
	}
	if out["train_count"] != 1024 {
		t.Fatalf("train_count %v, want 1024", out["train_count"])
	}
	dir := out["dir"].(string)
	for i, records := range []int{205, 205, 205, 205, 204} {
		name := fmt.Sprintf("data_batch_%d.bin", i+1)
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() != int64(records*data.RecordBytes) {
			t.Errorf("%s: %v, want %d records", name, err, records)
		}
	}
	m, err := data.Verify(filepath.Join(work, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Train.Records != 1024 {
		t.Errorf("manifest: %d training records", m.Train.Records)
	}
	for _, e := range m.Shards.Shards {
		if e.TrainRecords != 128 || e.TrainPadded != 0 {
			t.Errorf("shard %d: %d records, %d padded; want 128 and none", e.ShardID, e.TrainRecords, e.TrainPadded)
		}
	}
}

func TestPrepareSeedAndDefaults(t *testing.T) {
	hashes := func(with map[string]any) map[string]string {
		work, _, _, err := run(t, with)
		if err != nil {
			t.Fatal(err)
		}
		m, err := data.ReadManifest(filepath.Join(work, "data"))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, f := range m.Files {
			out[f.Path] = f.SHA256
		}
		return out
	}
	small := map[string]any{"train_images": 10, "test_images": 10, "seed": 7}
	a, b := hashes(small), hashes(small)
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs with seed 7 differ")
	}
	small["seed"] = 8
	c := hashes(small)
	if a["cifar-10-batches-bin/test_batch.bin"] == c["cifar-10-batches-bin/test_batch.bin"] {
		t.Error("seeds 7 and 8 give the same test batch")
	}

	_, out, _, err := run(t, map[string]any{"train_images": 10, "test_images": 10})
	if err != nil {
		t.Fatal(err)
	}
	m, err := data.ReadManifest(out["root"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if out["shards"] != 1 || m.Shards == nil || m.Shards.NumShards != 1 || m.Generator.Config.Seed != 1 {
		t.Errorf("defaults: outputs %v, shards %+v, generator %+v; want 1 shard and seed 1", out, m.Shards, m.Generator)
	}
}

// TestPrepareCopiesARealDataSet gives the stage the directory a synthetic
// run wrote, as a user gives the real cifar-10-batches-bin.
func TestPrepareCopiesARealDataSet(t *testing.T) {
	_, first, _, err := run(t, map[string]any{"train_images": 20, "test_images": 10})
	if err != nil {
		t.Fatal(err)
	}
	src := first["dir"].(string)
	work, out, _, err := run(t, map[string]any{"source": src, "shards": 2})
	if err != nil {
		t.Fatal(err)
	}
	if out["train_count"] != 20 || out["test_count"] != 10 || out["shards"] != 2 || out["dir"] != filepath.Join(work, "data", "cifar-10-batches-bin") {
		t.Errorf("outputs %v", out)
	}
	for _, name := range append(data.SynthFileNames(), data.MetaFileName) {
		a, errA := os.ReadFile(filepath.Join(src, name))
		b, errB := os.ReadFile(filepath.Join(out["dir"].(string), name))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: copy differs from the source (%v, %v)", name, errA, errB)
		}
	}
	m, err := data.Verify(out["root"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != "copy" || m.SourcePath != src || m.Generator != nil {
		t.Errorf("manifest source %q path %q generator %v", m.Source, m.SourcePath, m.Generator)
	}
}

func TestPrepareErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "cifar-10-batches-bin")
	cases := []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"source": "cifar-10-batches-bin"},
			`invalid with: /source: "cifar-10-batches-bin" is a relative path: give the absolute path of a cifar-10-batches-bin directory (or "synthetic")`},
		{map[string]any{"source": "/x", "train_images": 100},
			"invalid with: /train_images: train_images and test_images apply to source: synthetic only"},
		{map[string]any{"shards": 1.5}, "invalid with: /shards: want int, got number 1.5"},
	}
	for _, tc := range cases {
		_, out, _, err := run(t, tc.with)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: outputs %v, error %v; want %q", tc.with, out, err, tc.want)
		}
	}
	_, _, _, err := run(t, map[string]any{"source": missing})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing source: %v, want a not-exist error naming %s", err, missing)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = prepare.New().Run(ctx, plugins.RunRequest{With: map[string]any{"train_images": 10, "test_images": 10}, WorkDir: t.TempDir()}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
