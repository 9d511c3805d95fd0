package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/golden"
)

// record builds one record whose R, G and B planes are filled with r, g, b.
func record(label, r, g, b byte) []byte {
	rec := make([]byte, RecordBytes)
	rec[0] = label
	for i := range PlaneBytes {
		rec[1+i], rec[1+PlaneBytes+i], rec[1+2*PlaneBytes+i] = r, g, b
	}
	return rec
}

func records(labels ...byte) []byte {
	var out []byte
	for i, l := range labels {
		out = append(out, record(l, byte(i), byte(i+100), byte(i+200))...)
	}
	return out
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeStandardDir writes the six standard files, each with the given
// labels, into a new directory.
func writeStandardDir(t *testing.T, labels ...byte) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range SynthFileNames() {
		writeFile(t, filepath.Join(dir, name), records(labels...))
	}
	return dir
}

func TestParseBatchLayout(t *testing.T) {
	b := records(3, 9)
	b[1+5] = 77                        // R plane, pixel (0, 5) of record 0
	b[1+PlaneBytes+32*2+1] = 88        // G plane, pixel (2, 1)
	b[RecordBytes+1+2*PlaneBytes] = 99 // B plane, pixel (0, 0) of record 1
	set, err := ParseBatch("x.bin", b)
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != 2 || set.Label(0) != 3 || set.Label(1) != 9 {
		t.Fatalf("len %d labels %d %d, want 2 records labelled 3, 9", set.Len(), set.Label(0), set.Label(1))
	}
	img := set.Image(0)
	if len(img) != ImageBytes || img[5] != 77 || img[PlaneBytes+2*32+1] != 88 || img[0] != 0 || img[PlaneBytes] != 100 {
		t.Errorf("record 0 planes wrong: R[5]=%d G[2,1]=%d R[0]=%d G[0]=%d", img[5], img[PlaneBytes+65], img[0], img[PlaneBytes])
	}
	if got := set.Image(1)[2*PlaneBytes]; got != 99 {
		t.Errorf("record 1 B[0] = %d, want 99", got)
	}
	if h := set.ClassHistogram(); h[3] != 1 || h[9] != 1 || h[0] != 0 {
		t.Errorf("histogram %v", h)
	}
}

// TestReaderErrors pins the messages users see for bad data, with the
// temporary directory replaced by $DIR.
func TestReaderErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) (string, error) // returns what to read
		split Split
		file  bool // ReadFile instead of ReadDir
		want  error
	}{
		{"leftover bytes", func(t *testing.T, dir string) (string, error) {
			p := filepath.Join(dir, "data_batch_1.bin")
			writeFile(t, p, append(records(1, 2), 7, 7, 7))
			return p, nil
		}, "", true, ErrRecordSize},
		{"one byte left over", func(t *testing.T, dir string) (string, error) {
			p := filepath.Join(dir, "data_batch_1.bin")
			writeFile(t, p, append(records(1), 0))
			return p, nil
		}, "", true, ErrRecordSize},
		{"short record", func(t *testing.T, dir string) (string, error) {
			p := filepath.Join(dir, "test_batch.bin")
			writeFile(t, p, records(1)[:3000])
			return p, nil
		}, "", true, ErrRecordSize},
		{"label above 9", func(t *testing.T, dir string) (string, error) {
			p := filepath.Join(dir, "data_batch_2.bin")
			writeFile(t, p, records(0, 1, 2, 10, 4))
			return p, nil
		}, "", true, ErrLabel},
		{"label 255", func(t *testing.T, dir string) (string, error) {
			p := filepath.Join(dir, "data_batch_2.bin")
			writeFile(t, p, records(255))
			return p, nil
		}, "", true, ErrLabel},
		{"empty file", func(t *testing.T, dir string) (string, error) {
			p := filepath.Join(dir, "test_batch.bin")
			writeFile(t, p, nil)
			return p, nil
		}, "", true, ErrEmptyFile},
		{"missing file", func(t *testing.T, dir string) (string, error) {
			return filepath.Join(dir, "data_batch_9.bin"), nil
		}, "", true, fs.ErrNotExist},
		{"missing directory", func(t *testing.T, dir string) (string, error) {
			return filepath.Join(dir, "nope"), nil
		}, SplitTrain, false, fs.ErrNotExist},
		{"empty directory", func(t *testing.T, dir string) (string, error) {
			writeFile(t, filepath.Join(dir, "readme.html"), []byte("x"))
			return dir, nil
		}, SplitAll, false, ErrEmptyDir},
		{"missing train batch", func(t *testing.T, dir string) (string, error) {
			d := writeStandardDir(t, 1)
			os.Remove(filepath.Join(d, "data_batch_3.bin"))
			return d, nil
		}, SplitTrain, false, ErrMissingFile},
		{"missing test batch", func(t *testing.T, dir string) (string, error) {
			d := writeStandardDir(t, 1)
			os.Remove(filepath.Join(d, TestFile))
			return d, nil
		}, SplitAll, false, ErrMissingFile},
		{"bad label inside directory", func(t *testing.T, dir string) (string, error) {
			d := writeStandardDir(t, 1, 2)
			writeFile(t, filepath.Join(d, "data_batch_4.bin"), records(1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 12))
			return d, nil
		}, SplitTrain, false, ErrLabel},
		{"bad size inside directory", func(t *testing.T, dir string) (string, error) {
			d := writeStandardDir(t, 1, 2)
			writeFile(t, filepath.Join(d, TestFile), records(1)[:RecordBytes-1])
			return d, nil
		}, SplitTest, false, ErrRecordSize},
		{"unknown split", func(t *testing.T, dir string) (string, error) {
			return writeStandardDir(t, 1), nil
		}, Split("validation"), false, ErrConfig},
	}
	var errs strings.Builder
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			target, _ := tc.setup(t, dir)
			var err error
			if tc.file {
				_, err = ReadFile(target)
			} else {
				_, err = ReadDir(target, tc.split)
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v does not wrap %v", err, tc.want)
			}
			msg := err.Error()
			msg = strings.ReplaceAll(msg, dir, "$DIR")
			msg = strings.ReplaceAll(msg, target, "$DIR")
			fmt.Fprintf(&errs, "%s: %s\n", tc.name, msg)
		})
	}
	golden.Check(t, filepath.Join("testdata", "reader_errors.golden"), []byte(errs.String()))
}

func TestReadDirSplitsAndOrder(t *testing.T) {
	dir := t.TempDir()
	for i, name := range SynthFileNames() {
		writeFile(t, filepath.Join(dir, name), records(byte(i), byte(i)))
	}
	// Files a reader must skip: not .bin, a directory, and a .bin without
	// "batch" in its name.
	writeFile(t, filepath.Join(dir, MetaFileName), []byte("airplane\n"))
	writeFile(t, filepath.Join(dir, "extra.bin"), records(9))
	if err := os.Mkdir(filepath.Join(dir, "sub_batch.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		split  Split
		labels []byte
		files  []string
	}{
		{SplitTrain, []byte{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, TrainFileNames()},
		{SplitTest, []byte{5, 5}, []string{TestFile}},
		{SplitAll, []byte{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, SynthFileNames()},
	}
	for _, tc := range cases {
		t.Run(string(tc.split), func(t *testing.T) {
			set, err := ReadDir(dir, tc.split)
			if err != nil {
				t.Fatal(err)
			}
			var labels []byte
			for i := range set.Len() {
				labels = append(labels, set.Label(i))
			}
			if string(labels) != string(tc.labels) {
				t.Errorf("labels %v, want %v", labels, tc.labels)
			}
			files := set.Files()
			if len(files) != len(tc.files) {
				t.Fatalf("files %v, want %v", files, tc.files)
			}
			for i, f := range files {
				if f.Name != tc.files[i] || f.First != 2*i || f.Count != 2 {
					t.Errorf("file %d = %+v, want %s at %d", i, f, tc.files[i], 2*i)
				}
			}
		})
	}
}

func TestSelectCopiesRecords(t *testing.T) {
	set, err := ParseBatch("x.bin", records(0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	sub := set.Select([]int{3, 0, 3})
	if sub.Len() != 3 || sub.Label(0) != 3 || sub.Label(1) != 0 || sub.Label(2) != 3 {
		t.Fatalf("select labels wrong: %d %d %d", sub.Label(0), sub.Label(1), sub.Label(2))
	}
	if string(sub.Record(0)) != string(set.Record(3)) {
		t.Error("selected record differs from the source")
	}
	sub.Bytes()[1] = 250
	if set.Record(3)[1] == 250 {
		t.Error("Select aliases the source")
	}
}
