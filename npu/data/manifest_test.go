package data

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func prepareSynthetic(t *testing.T, shards int) (string, *Manifest) {
	t.Helper()
	root := t.TempDir()
	m, err := Prepare(context.Background(), root, PrepareOptions{Source: SourceSynthetic, Synth: smallSynth(), NumShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return root, m
}

func TestPrepareSyntheticManifest(t *testing.T) {
	root, m := prepareSynthetic(t, 3)
	if m.Source != SourceSynthetic || m.Generator == nil || m.Generator.Version != GeneratorVersion || m.Generator.Config != smallSynth() {
		t.Errorf("generator info %+v", m.Generator)
	}
	if m.Train.Records != 250 || m.Test.Records != 30 {
		t.Errorf("split records train %d test %d, want 250 and 30", m.Train.Records, m.Test.Records)
	}
	// 50 per file: each class 5 times per train file.
	for c, n := range m.Train.ClassHistogram {
		if n != 25 {
			t.Errorf("train class %d has %d records, want 25", c, n)
		}
	}
	// 9 files in the data dir and shards dir: 6 batches + meta + 2*3 shards.
	if len(m.Files) != 13 {
		t.Fatalf("%d files in the manifest, want 13", len(m.Files))
	}
	for _, f := range m.Files {
		size, sum, err := hashFile(filepath.Join(root, f.Path))
		if err != nil || size != f.Bytes || sum != f.SHA256 {
			t.Errorf("%s: manifest says %d bytes %s, disk has %d %s (%v)", f.Path, f.Bytes, f.SHA256, size, sum, err)
		}
	}
	if m.Shards == nil || m.Shards.NumShards != 3 || len(m.Shards.Shards) != 3 {
		t.Fatalf("shards %+v", m.Shards)
	}
	// ceil(250/3) = 84 train (2 padded positions in all), ceil(30/3) = 10 test.
	padded := 0
	for k, s := range m.Shards.Shards {
		if s.ShardID != k || s.TrainRecords != 84 || s.TestRecords != 10 || s.TestPadded != 0 {
			t.Errorf("shard %d: %+v", k, s)
		}
		padded += s.TrainPadded
		set, err := ReadFile(filepath.Join(root, s.TrainFile))
		if err != nil {
			t.Fatal(err)
		}
		full, _ := ReadDir(filepath.Join(root, DataDirName), SplitTrain)
		want, _ := ShardIndices(nil, full.Len(), 3, k, nil)
		for j, i := range want {
			if string(set.Record(j)) != string(full.Record(i)) {
				t.Fatalf("shard %d record %d is not train record %d", k, j, i)
			}
		}
	}
	if padded != 2 {
		t.Errorf("%d padded train positions, want 2", padded)
	}

	// Round trip: the file on disk reads back equal to what Prepare returned.
	back, err := ReadManifest(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Errorf("manifest read back differs:\n%+v\n%+v", back, m)
	}
	if _, err := Verify(root); err != nil {
		t.Errorf("fresh data set does not verify: %v", err)
	}
}

func TestPrepareIsDeterministic(t *testing.T) {
	_, a := prepareSynthetic(t, 2)
	_, b := prepareSynthetic(t, 2)
	if !reflect.DeepEqual(a.Files, b.Files) {
		t.Error("two runs with the same seed wrote different files")
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, root string)
		want   []string
	}{
		{"flipped byte", func(t *testing.T, root string) {
			p := filepath.Join(root, DataDirName, "data_batch_3.bin")
			b, _ := os.ReadFile(p)
			b[5000] ^= 1
			writeFile(t, p, b)
		}, []string{"cifar-10-batches-bin/data_batch_3.bin: data set does not match its manifest: sha256 "}},
		{"truncated shard", func(t *testing.T, root string) {
			p := filepath.Join(root, ShardsDirName, "train_shard_1_of_2.bin")
			b, _ := os.ReadFile(p)
			writeFile(t, p, b[:len(b)-RecordBytes])
		}, []string{"shards/train_shard_1_of_2.bin: data set does not match its manifest: size 381052 bytes, manifest says 384125"}},
		{"missing file", func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, DataDirName, TestFile))
		}, []string{"cifar-10-batches-bin/test_batch.bin: data set does not match its manifest: file is missing"}},
		{"extra batch file", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, DataDirName, "data_batch_6.bin"), records(1))
		}, []string{"cifar-10-batches-bin/data_batch_6.bin: data set does not match its manifest: file is not in the manifest"}},
		{"two problems", func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, DataDirName, MetaFileName))
			writeFile(t, filepath.Join(root, DataDirName, "data_batch_1.bin"), records(1))
		}, []string{
			"cifar-10-batches-bin/batches.meta.txt: data set does not match its manifest: file is missing",
			"cifar-10-batches-bin/data_batch_1.bin: data set does not match its manifest: size 3073 bytes, manifest says 153650",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := prepareSynthetic(t, 2)
			tc.damage(t, root)
			_, err := Verify(root)
			if err == nil {
				t.Fatal("damaged data set verifies")
			}
			if !errors.Is(err, ErrManifest) {
				t.Errorf("error does not wrap ErrManifest: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not report %q", err, w)
				}
			}
			if got := strings.Count(err.Error(), "\n") + 1; got != len(tc.want) {
				t.Errorf("%d problems reported, want %d: %v", got, len(tc.want), err)
			}
		})
	}
}

func TestReadManifestRejectsBadFiles(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"not json", "{", "unexpected EOF"},
		{"unknown field", `{"format":"cifar-10-binary","manifest_version":1,"colour":"red"}`, `unknown field "colour"`},
		{"wrong version", `{"format":"cifar-10-binary","manifest_version":7}`, `format "cifar-10-binary" version 7, want "cifar-10-binary" version 1`},
		{"escaping path", `{"format":"cifar-10-binary","manifest_version":1,"files":[{"path":"../x.bin","bytes":1,"sha256":""}]}`, `file path "../x.bin" leaves the root`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, ManifestName), []byte(tc.body))
			_, err := ReadManifest(root)
			if err == nil || !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrManifest mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := Verify(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no manifest: %v, want not-exist", err)
	}
}

func TestPrepareCopiesARealLayout(t *testing.T) {
	// A synthetic directory stands in for a downloaded cifar-10-batches-bin;
	// its parent is given, as a user would after unpacking the archive.
	src := t.TempDir()
	if err := WriteSynthetic(context.Background(), filepath.Join(src, DataDirName), smallSynth()); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	m, err := Prepare(context.Background(), root, PrepareOptions{Source: src, NumShards: 0})
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != SourceCopy || m.SourcePath != filepath.Join(src, DataDirName) || m.Generator != nil || m.Shards != nil {
		t.Errorf("copy manifest %+v", m)
	}
	_, synth := prepareSynthetic(t, 0)
	if !reflect.DeepEqual(m.Files, synth.Files) {
		t.Error("copied files differ from the source files")
	}
	if _, err := Verify(root); err != nil {
		t.Error(err)
	}

	// A bad source is refused before anything is written.
	bad := t.TempDir()
	if err := WriteSynthetic(context.Background(), bad, smallSynth()); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bad, "data_batch_2.bin"), records(1, 2, 30))
	out := t.TempDir()
	_, err = Prepare(context.Background(), out, PrepareOptions{Source: bad})
	if !errors.Is(err, ErrLabel) || !strings.Contains(err.Error(), "data_batch_2.bin: record 2") {
		t.Errorf("bad source: %v, want a label error naming data_batch_2.bin record 2", err)
	}
	if _, err := os.Stat(filepath.Join(out, ManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Error("a failed prepare left a manifest")
	}
}

func TestPrepareReplacesAnOldRoot(t *testing.T) {
	root, _ := prepareSynthetic(t, 4)
	m, err := Prepare(context.Background(), root, PrepareOptions{Source: SourceSynthetic, Synth: smallSynth(), NumShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, ShardsDirName))
	if len(entries) != 4 {
		t.Errorf("shards dir has %d files after re-preparing with 2 shards, want 4", len(entries))
	}
	if _, err := Verify(root); err != nil {
		t.Error(err)
	}
	if m.Shards.NumShards != 2 {
		t.Errorf("num_shards %d", m.Shards.NumShards)
	}
}

func TestPrepareOptionErrors(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		opts PrepareOptions
		want error
	}{
		{PrepareOptions{Source: SourceSynthetic, Synth: smallSynth(), NumShards: -1}, ErrConfig},
		{PrepareOptions{}, ErrConfig},
		{PrepareOptions{Source: SourceSynthetic}, ErrConfig}, // zero-sized synthetic set
		{PrepareOptions{Source: "/nonexistent/cifar"}, os.ErrNotExist},
	}
	for _, tc := range cases {
		if _, err := Prepare(ctx, t.TempDir(), tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%+v: error %v, want %v", tc.opts, err, tc.want)
		}
	}
}

func TestManifestJSONShape(t *testing.T) {
	_, m := prepareSynthetic(t, 1)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"format", "manifest_version", "source", "generator", "data_dir", "train", "test", "shards", "files"} {
		if _, ok := generic[key]; !ok {
			t.Errorf("manifest JSON lacks %q", key)
		}
	}
	gen := generic["generator"].(map[string]any)
	if gen["name"] != GeneratorName || gen["config"].(map[string]any)["seed"] != 1.0 {
		t.Errorf("generator JSON %v", gen)
	}
}
