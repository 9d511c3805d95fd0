package data

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Layout of the CIFAR-10 binary format.
const (
	// ImageSize is the height and width of an image in pixels.
	ImageSize = 32
	// Channels is the number of colour planes (R, G, B).
	Channels = 3
	// NumClasses is the number of labels; a label byte is 0..NumClasses-1.
	NumClasses = 10
	// PlaneBytes is the size of one colour plane (row-major 32×32).
	PlaneBytes = ImageSize * ImageSize
	// ImageBytes is the size of one image: the R plane, then G, then B.
	ImageBytes = Channels * PlaneBytes
	// RecordBytes is the size of one record: a label byte, then the image.
	RecordBytes = 1 + ImageBytes
)

// DataDirName is the directory name the real archive unpacks to and the
// seeds' create_dataset reads.
const DataDirName = "cifar-10-batches-bin"

// MetaFileName lists the class names, one per line, in label order.
const MetaFileName = "batches.meta.txt"

// TestFile is the test batch of the format.
const TestFile = "test_batch.bin"

// NumTrainFiles is the number of train batch files, data_batch_1.bin ..
// data_batch_5.bin.
const NumTrainFiles = 5

// TrainFileNames returns the train batch file names in order.
func TrainFileNames() []string {
	names := make([]string, NumTrainFiles)
	for i := range names {
		names[i] = fmt.Sprintf("data_batch_%d.bin", i+1)
	}
	return names
}

// ClassNames returns CIFAR-10's labels in order; the synthetic generator
// writes them to batches.meta.txt like the real archive.
func ClassNames() [NumClasses]string {
	return [NumClasses]string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}
}

// Split selects which batch files a directory read uses, as MindSpore's
// Cifar10Dataset usage argument does: it keeps the .bin files whose name
// contains "data_batch" (train), "test_batch" (test) or "batch" (all), in
// name order, so "all" is the five train batches followed by the test batch.
// MindSpore's default usage is "all", so the seeds' create_dataset trains on
// all 60,000 images; mspipe's stages choose train and test explicitly.
type Split string

const (
	SplitTrain Split = "train"
	SplitTest  Split = "test"
	SplitAll   Split = "all"
)

func (s Split) nameFilter() (string, error) {
	switch s {
	case SplitTrain:
		return "data_batch", nil
	case SplitTest:
		return "test_batch", nil
	case SplitAll, "":
		return "batch", nil
	}
	return "", fmt.Errorf("%w: split %q is not train, test or all", ErrConfig, string(s))
}

func (s Split) required() []string {
	switch s {
	case SplitTrain:
		return TrainFileNames()
	case SplitTest:
		return []string{TestFile}
	}
	return append(TrainFileNames(), TestFile)
}

// FileSpan says which records of a Set came from which file.
type FileSpan struct {
	Name  string // base name of the file
	First int    // index of the file's first record in the Set
	Count int    // number of records in the file
}

// Set is a parsed sequence of CIFAR-10 records kept in the file layout: one
// contiguous byte slice, RecordBytes per record. Reading does not copy or
// convert images; transforms read the planes directly.
type Set struct {
	raw   []byte
	files []FileSpan
}

// Len returns the number of records.
func (s *Set) Len() int { return len(s.raw) / RecordBytes }

// Label returns record i's label, 0..9.
func (s *Set) Label(i int) uint8 { return s.raw[i*RecordBytes] }

// Image returns record i's 3072 pixel bytes: the R plane, then G, then B,
// each row-major 32×32 (CHW). The slice aliases the Set.
func (s *Set) Image(i int) []byte {
	off := i*RecordBytes + 1
	return s.raw[off : off+ImageBytes : off+ImageBytes]
}

// Record returns record i's 3073 bytes as stored in the file.
func (s *Set) Record(i int) []byte {
	off := i * RecordBytes
	return s.raw[off : off+RecordBytes : off+RecordBytes]
}

// Bytes returns all records in file layout. The slice aliases the Set.
func (s *Set) Bytes() []byte { return s.raw }

// Files returns the files the Set was read from, in read order.
func (s *Set) Files() []FileSpan { return slices.Clone(s.files) }

// ClassHistogram counts the records of each label.
func (s *Set) ClassHistogram() [NumClasses]int {
	var h [NumClasses]int
	for i := range s.Len() {
		h[s.Label(i)]++
	}
	return h
}

// Select returns a new Set holding copies of the given records, in order.
func (s *Set) Select(indices []int) *Set {
	raw := make([]byte, len(indices)*RecordBytes)
	for j, i := range indices {
		copy(raw[j*RecordBytes:], s.Record(i))
	}
	return &Set{raw: raw, files: []FileSpan{{Name: "", First: 0, Count: len(indices)}}}
}

// ParseBatch checks that b is a whole number of CIFAR-10 records with labels
// 0..9 and returns them as a Set that aliases b. name is used in errors.
func ParseBatch(name string, b []byte) (*Set, error) {
	if err := checkRecords(name, b); err != nil {
		return nil, err
	}
	return &Set{raw: b, files: []FileSpan{{Name: filepath.Base(name), Count: len(b) / RecordBytes}}}, nil
}

func checkRecords(name string, b []byte) error {
	if err := checkSize(name, int64(len(b))); err != nil {
		return err
	}
	for off := 0; off < len(b); off += RecordBytes {
		if label := b[off]; label >= NumClasses {
			return fmt.Errorf("read cifar-10 batch %s: record %d (byte offset %d): %w: %d is above %d",
				name, off/RecordBytes, off, ErrLabel, label, NumClasses-1)
		}
	}
	return nil
}

func checkSize(name string, size int64) error {
	if size == 0 {
		return fmt.Errorf("read cifar-10 batch %s: %w: the file is empty", name, ErrEmptyFile)
	}
	if left := size % RecordBytes; left != 0 {
		whole := size / RecordBytes
		return fmt.Errorf("read cifar-10 batch %s: %w: %d bytes = %d %s + %d %s left over",
			name, ErrRecordSize, size, whole, plural(whole, "record", "records"), left, plural(left, "byte", "bytes"))
	}
	return nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ReadFile reads one batch file with a single read and parses it.
func ReadFile(path string) (*Set, error) {
	return readFiles([]string{path})
}

// ReadDir reads the batch files of a cifar-10-batches-bin directory that
// split selects (see Split), in name order, into one Set. The standard files
// of the split must all be present (data_batch_1.bin .. data_batch_5.bin for
// train, test_batch.bin for test). Each file is read with one read call into
// one shared buffer; no file is mapped or read twice.
func ReadDir(dir string, split Split) (*Set, error) {
	filter, err := split.nameFilter()
	if err != nil {
		return nil, fmt.Errorf("read cifar-10 dir %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read cifar-10 dir %s: %w", dir, pathCause(err))
	}
	var bins, chosen []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || filepath.Ext(name) != ".bin" {
			continue
		}
		bins = append(bins, name)
		if strings.Contains(name, filter) {
			chosen = append(chosen, name)
		}
	}
	if len(bins) == 0 {
		return nil, fmt.Errorf("read cifar-10 dir %s: %w: the directory has no .bin file", dir, ErrEmptyDir)
	}
	for _, want := range split.required() {
		if !slices.Contains(chosen, want) {
			return nil, fmt.Errorf("read cifar-10 dir %s: %w %s (split %s needs %s)",
				dir, ErrMissingFile, want, splitName(split), strings.Join(split.required(), ", "))
		}
	}
	slices.Sort(chosen) // os.ReadDir sorts already; keep the rule explicit
	paths := make([]string, len(chosen))
	for i, name := range chosen {
		paths[i] = filepath.Join(dir, name)
	}
	return readFiles(paths)
}

func splitName(s Split) string {
	if s == "" {
		return string(SplitAll)
	}
	return string(s)
}

// readFiles sizes every file first (so a bad size is reported before any
// large read), then reads each into its part of one buffer.
func readFiles(paths []string) (*Set, error) {
	sizes := make([]int64, len(paths))
	var total int64
	for i, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("read cifar-10 batch %s: %w", p, pathCause(err))
		}
		if st.IsDir() {
			return nil, fmt.Errorf("read cifar-10 batch %s: is a directory", p)
		}
		if err := checkSize(p, st.Size()); err != nil {
			return nil, err
		}
		sizes[i] = st.Size()
		total += st.Size()
	}
	raw := make([]byte, total)
	files := make([]FileSpan, len(paths))
	var off int64
	for i, p := range paths {
		part := raw[off : off+sizes[i]]
		if err := readInto(p, part); err != nil {
			return nil, err
		}
		if err := checkRecords(p, part); err != nil {
			return nil, err
		}
		files[i] = FileSpan{Name: filepath.Base(p), First: int(off / RecordBytes), Count: int(sizes[i] / RecordBytes)}
		off += sizes[i]
	}
	return &Set{raw: raw, files: files}, nil
}

func readInto(path string, dst []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read cifar-10 batch %s: %w", path, pathCause(err))
	}
	defer f.Close()
	if _, err := io.ReadFull(f, dst); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return fmt.Errorf("read cifar-10 batch %s: the file shrank while being read", path)
		}
		return fmt.Errorf("read cifar-10 batch %s: %w", path, err)
	}
	return nil
}

// EncodeRecord writes one record (label byte, then the CHW image) into dst,
// which must be RecordBytes long.
func EncodeRecord(dst []byte, label uint8, image []byte) {
	dst[0] = label
	copy(dst[1:RecordBytes], image)
}

// pathCause drops the *fs.PathError wrapper, whose path the caller's message
// already names, keeping the cause (errors.Is(err, fs.ErrNotExist) still
// holds).
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
