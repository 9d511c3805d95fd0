package reshard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// ManifestName is the manifest's file name in an output directory.
const ManifestName = "manifest.json"

// ManifestFormat identifies the manifest's schema. Format 2 added
// crc_trailer; a format 1 manifest is read as one with crc_trailer true,
// as every file had the trailer then.
const (
	ManifestFormat   = "mspipe-reshard/2"
	manifestFormatV1 = "mspipe-reshard/1"
)

// maxManifestBytes bounds the manifest read by Verify.
const maxManifestBytes = 64 << 20

// Manifest describes a complete output set: its files and, per logical
// tensor, the content hash of the whole tensor (ckpt.Tensor.Hash of it,
// whatever the layout) and the box each rank holds.
type Manifest struct {
	Format         string         `json:"format"`
	Ranks          int            `json:"ranks"`
	ReplicatedRule string         `json:"replicated_rule"`
	CRCTrailer     bool           `json:"crc_trailer"` // the files end in MindSpore's crc_num trailer
	Files          []ManifestFile `json:"files"`
	// Strategy is the set's strategy file (the target layout a reshard
	// writes), absent for a merge.
	Strategy *ManifestStrategy `json:"strategy,omitempty"`
	Tensors  []ManifestTensor  `json:"tensors"` // in file order
	Stats    *RunStats         `json:"stats,omitempty"`
}

// ManifestFile is one rank's output file.
type ManifestFile struct {
	Rank  int    `json:"rank"`
	Path  string `json:"path"` // relative to the manifest's directory, slash-separated
	Bytes int64  `json:"bytes"`
	CRC32 string `json:"crc32"` // CRC-32 of the content (all but a crc_num trailer, which holds the same value), 8 hex digits
}

// ManifestStrategy is the strategy file written with a set.
type ManifestStrategy struct {
	Path   string `json:"path"` // relative to the manifest's directory, slash-separated
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"` // of the file's bytes
}

// maxStrategyBytes bounds the strategy file Verify reads.
const maxStrategyBytes = 256 << 20

// strategyEntry hashes the strategy file rel in dir for the manifest.
func strategyEntry(ctx context.Context, dir, rel string) (*ManifestStrategy, error) {
	p, err := userfile.Within(dir, filepath.FromSlash(rel))
	if err != nil {
		return nil, fmt.Errorf("strategy file %q: %w", rel, err)
	}
	data, err := userfile.ReadFile(ctx, p, maxStrategyBytes)
	if err != nil {
		return nil, fmt.Errorf("strategy file: %w", err)
	}
	sum := sha256.Sum256(data)
	return &ManifestStrategy{Path: filepath.ToSlash(rel), Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// verifyStrategy checks the set's strategy file against m: present, its
// size and hash the manifest's, and readable as a strategy file.
func verifyStrategy(ctx context.Context, dir string, m *Manifest) error {
	if m.Strategy == nil {
		return nil
	}
	got, err := strategyEntry(ctx, dir, m.Strategy.Path)
	if err != nil {
		return fmt.Errorf("%w: %w", err, ErrVerify)
	}
	p := filepath.Join(dir, filepath.FromSlash(m.Strategy.Path))
	if got.Bytes != m.Strategy.Bytes || got.SHA256 != m.Strategy.SHA256 {
		return fmt.Errorf("%s: %d bytes, sha256 %s; the manifest says %d bytes, sha256 %s: %w", p, got.Bytes, got.SHA256, m.Strategy.Bytes, m.Strategy.SHA256, ErrVerify)
	}
	if _, err := parallel.ReadStrategyFile(p); err != nil {
		return fmt.Errorf("%w: %w", err, ErrVerify)
	}
	return nil
}

// CheckListed refuses files in the set at dir that m does not list, as
// Verify does; see checkListed.
func CheckListed(dir string, m *Manifest) error { return checkListed(dir, m) }

// checkListed refuses files in the set at dir that the manifest does not
// list: a stale checkpoint beside a rank's file would be what a loader
// picks. Everything under the manifest's own directories is the set's
// (device{i}/ for a reshard output); at the top, only files that look like
// a set's (checkpoints, strategy files) are, since a merged checkpoint and
// its manifest may sit among unrelated files.
func checkListed(dir string, m *Manifest) error {
	listed := map[string]bool{ManifestName: true}
	tops := map[string]bool{}
	for _, f := range m.Files {
		listed[path.Clean(f.Path)] = true
		if top, _, nested := strings.Cut(path.Clean(f.Path), "/"); nested {
			tops[top] = true
		}
	}
	if m.Strategy != nil {
		listed[path.Clean(m.Strategy.Path)] = true
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		top, _, nested := strings.Cut(rel, "/")
		if d.IsDir() {
			if !nested && !tops[top] && !isRankDir(top) {
				return fs.SkipDir // not the set's: left alone
			}
			return nil
		}
		if listed[rel] {
			return nil
		}
		if nested || isSetFile(rel) {
			return fmt.Errorf("%s: not listed in %s, so not part of the set (a stale or foreign file): remove it, or write the set to a new directory: %w", p, ManifestName, ErrVerify)
		}
		return nil
	})
}

// isRankDir reports whether name is a rank's directory of the set layout
// (device{i}).
func isRankDir(name string) bool {
	n, ok := strings.CutPrefix(name, "device")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

// isSetFile reports whether a top-level file name looks like part of a
// checkpoint set: a checkpoint or a strategy file. (A .safetensors beside a
// merged checkpoint is its conversion, which nothing loads as a set.)
func isSetFile(name string) bool {
	lower := strings.ToLower(name)
	return strings.HasSuffix(lower, ".ckpt") || lower == "strategy.json"
}

// ManifestTensor is one logical tensor of the set.
type ManifestTensor struct {
	Name   string `json:"name"`
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Rule says where the values came from: "split" for a placed tensor,
	// "rank0" or "mean" for a replicated one.
	Rule string `json:"rule"`
	// Boxes holds each rank's box (each listed rank's, when Ranks is
	// given); absent when every rank holds the whole tensor.
	Boxes []manifestBox `json:"boxes,omitempty"`
	// Ranks lists the ranks whose files hold the tensor (a pipeline
	// stage's), ascending; absent when every rank's does.
	Ranks []int `json:"ranks,omitempty"`
}

// manifestBox is a parallel.Box with lower-case JSON names.
type manifestBox struct {
	Offset []int `json:"offset"`
	Shape  []int `json:"shape"`
}

// RunStats are what a run measured.
type RunStats struct {
	SourceBytes int64 `json:"source_bytes,omitempty"` // the source files' sizes, together
	ReadBytes   int64 `json:"read_bytes"`
	WriteBytes  int64 `json:"write_bytes"`
	PeakMemory  int64 `json:"peak_memory"` // most tensor data held at once
}

// Placement returns the tensor's placement in a set of n ranks. Boxes
// that do not match Ranks are kept as they are, for Plan or Verify to
// refuse.
func (t ManifestTensor) Placement(n int) Placement {
	p := Placement{Shape: slices.Clone(t.Shape), Ranks: slices.Clone(t.Ranks)}
	var boxes []parallel.Box
	for _, b := range t.Boxes {
		boxes = append(boxes, parallel.Box{Offset: slices.Clone(b.Offset), Shape: slices.Clone(b.Shape)})
	}
	if t.Ranks == nil || len(boxes) != len(t.Ranks) || p.checkRanks(n) != nil {
		p.Boxes = boxes
		return p
	}
	p.Boxes = make([]parallel.Box, n)
	for i, r := range t.Ranks {
		p.Boxes[r] = boxes[i]
	}
	return p
}

// holds reports whether rank r's file holds the tensor.
func (t ManifestTensor) holds(r int) bool { return Placement{Ranks: t.Ranks}.holds(r) }

// Source returns the set described by m in dir as a Source, to reshard it
// again.
func (m *Manifest) Source(dir string) Source {
	s := Source{Placements: make(map[string]Placement)}
	for _, f := range m.Files {
		s.Files = append(s.Files, filepath.Join(dir, filepath.FromSlash(f.Path)))
	}
	for _, t := range m.Tensors {
		if t.Boxes != nil || t.Ranks != nil {
			s.Placements[t.Name] = t.Placement(len(m.Files))
		}
	}
	return s
}

func writeManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, ManifestName), append(data, '\n'), 0o644)
}

// ReadManifest reads the manifest of the output set in dir.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	data, err := userfile.ReadFile(context.Background(), path, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch m.Format {
	case ManifestFormat:
	case manifestFormatV1:
		m.CRCTrailer = true
	default:
		return nil, fmt.Errorf("%s: format %q, want %q", path, m.Format, ManifestFormat)
	}
	if m.Ranks < 1 || len(m.Files) != m.Ranks {
		return nil, fmt.Errorf("%s: %d files for %d ranks: %w", path, len(m.Files), m.Ranks, ErrVerify)
	}
	for r, f := range m.Files {
		if f.Rank != r {
			return nil, fmt.Errorf("%s: file %d is for rank %d: %w", path, r, f.Rank, ErrVerify)
		}
	}
	return &m, nil
}

// Verify re-reads the output set in dir and checks it against its
// manifest: no file of the set's kind that it does not list, the strategy
// file's size and hash, file sizes and CRC-32s, every rank's tensors in order
// with the shapes of their boxes, identical copies wherever ranks share a
// box, and the hash of every reassembled tensor.
func Verify(ctx context.Context, dir string, opt Options) (*Manifest, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := checkListed(dir, m); err != nil {
		return nil, err
	}
	if err := verifyStrategy(ctx, dir, m); err != nil {
		return nil, err
	}
	if err := verifySet(ctx, dir, m, opt, nil); err != nil {
		return nil, err
	}
	return m, nil
}

// openedSet is an output set's files, opened and indexed by verifyFiles.
type openedSet struct {
	paths []string
	files []*os.File
	index []*ckpt.Index
	// positions maps, for a rank holding only some of the set's tensors,
	// each name to its position in the rank's file; nil for the others.
	positions []map[string]int
}

func (s *openedSet) close() {
	for _, f := range s.files {
		if f != nil {
			f.Close()
		}
	}
}

// verifyFiles re-reads every file of the set in dir, in parallel, and
// checks it against m: its size, its CRC-32 (the content's, the manifest's
// and a trailer's, when the set has them, agree) and its framing (the manifest's tensors in
// order). The caller closes the set.
func verifyFiles(ctx context.Context, dir string, m *Manifest, opt Options) (*openedSet, error) {
	n := len(m.Files)
	paths := make([]string, n)
	for r, f := range m.Files {
		p, err := userfile.Within(dir, filepath.FromSlash(f.Path))
		if err != nil {
			return nil, fmt.Errorf("manifest file %q: %w", f.Path, err)
		}
		paths[r] = p
	}
	files := make([]*os.File, n)
	positions := make([]map[string]int, n)
	set := &openedSet{paths: paths, files: files, positions: positions}
	index := make([]*ckpt.Index, n)
	set.index = index
	err := forEach(ctx, n, opt.Workers, func(r int) error {
		f, info, err := userfile.Open(paths[r])
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		files[r] = f
		if info.Size() != m.Files[r].Bytes {
			return fmt.Errorf("%s: %d bytes, the manifest says %d: %w", paths[r], info.Size(), m.Files[r].Bytes, ErrVerify)
		}
		sum, trailer, err := ckpt.ContentCRC(paths[r], f, info.Size())
		if err != nil {
			return err
		}
		if got := fmt.Sprintf("%08x", sum); got != m.Files[r].CRC32 {
			return fmt.Errorf("%s: %w: content has %s, the manifest says %s (file damaged): %w", paths[r], ckpt.ErrCRC, got, m.Files[r].CRC32, ErrVerify)
		}
		if trailer != m.CRCTrailer {
			return fmt.Errorf("%s: crc_num trailer present %v, the manifest says %v: %w", paths[r], trailer, m.CRCTrailer, ErrVerify)
		}
		x, err := ckpt.IndexReader(paths[r], f, info.Size())
		if err != nil {
			return err
		}
		var want []string
		for _, t := range m.Tensors {
			if t.holds(r) {
				want = append(want, t.Name)
			}
		}
		if len(x.Tensors) != len(want) {
			return fmt.Errorf("%s: %d tensors, the manifest gives rank %d %d: %w", paths[r], len(x.Tensors), r, len(want), ErrVerify)
		}
		for i, t := range x.Tensors {
			if t.Name != want[i] {
				return fmt.Errorf("%s: tensor %d is %q, the manifest says %q: %w", paths[r], i, t.Name, want[i], ErrVerify)
			}
		}
		index[r] = x
		if len(want) != len(m.Tensors) {
			// Rank r holds only some tensors (a pipeline stage's):
			// verifyTensor finds them by name.
			at := make(map[string]int, len(want))
			for i, name := range want {
				at[name] = i
			}
			positions[r] = at
		}
		return nil
	})
	if err != nil {
		set.close()
		return nil, err
	}
	return set, nil
}

// verifySet checks the files in dir against m as verifyFiles does, then
// reassembles every tensor, checking that ranks sharing a box hold the
// same bytes and that the tensor's content hash is the manifest's. arena
// is its memory for tensor data; nil means as much as it needs up to
// opt.MaxMemory.
func verifySet(ctx context.Context, dir string, m *Manifest, opt Options, arena []byte) error {
	set, err := verifyFiles(ctx, dir, m, opt)
	if err != nil {
		return err
	}
	defer set.close()
	paths, files, index, positions := set.paths, set.files, set.index, set.positions
	// Tensors are checked in parallel, each worker with an equal share of
	// the memory, unless a tensor's rows need more than a share.
	var widest, biggest int64 // row and tensor bytes
	for _, t := range m.Tensors {
		elem, _ := ckpt.DTypeSize(t.DType)
		g := geom(t.Shape)
		widest = max(widest, volume(g[1:])*int64(elem))
		biggest = max(biggest, volume(g)*int64(elem))
	}
	if arena == nil {
		workers := int64(max(1, min(opt.Workers, len(m.Tensors))))
		// Bands of maxBandBytes are enough: more memory only pages in more.
		size := min(opt.MaxMemory, 2*biggest*workers, 2*max(maxBandBytes, widest)*workers)
		if 2*widest > size {
			return fmt.Errorf("one row of the widest tensor needs %s twice, the cap is %s: %w", bytesize.Format(widest), bytesize.Format(opt.MaxMemory), ErrMemory)
		}
		arena = make([]byte, size)
	}
	workers := max(1, min(opt.Workers, len(m.Tensors)))
	if 2*widest > int64(len(arena))/int64(workers) {
		workers = 1
	}
	share := int64(len(arena)) / int64(workers)
	return forEachWorker(ctx, len(m.Tensors), workers, func(w, i int) error {
		mine := arena[int64(w)*share : int64(w+1)*share]
		return verifyTensor(ctx, i, m.Tensors[i], paths, index, positions, files, mine[:share/2], mine[share/2:], opt)
	})
}

// verifyTensor checks tensor i of the set, reading bands into band; scratch
// is as large.
func verifyTensor(ctx context.Context, i int, t ManifestTensor, paths []string, index []*ckpt.Index, positions []map[string]int, files []*os.File, band, scratch []byte, opt Options) error {
	n := len(paths)
	elem, ok := ckpt.DTypeSize(t.DType)
	if !ok {
		return fmt.Errorf("manifest tensor %q: dtype %q: %w", t.Name, t.DType, ErrVerify)
	}
	p := t.Placement(n)
	if err := p.checkRanks(n); err != nil {
		return fmt.Errorf("manifest tensor %q: %w", t.Name, err)
	}
	if t.Ranks != nil && t.Boxes != nil && len(t.Boxes) != len(t.Ranks) {
		return fmt.Errorf("manifest tensor %q: %d boxes for %d ranks: %w", t.Name, len(t.Boxes), len(t.Ranks), ErrVerify)
	}
	if p.Boxes == nil {
		for range n {
			p.Boxes = append(p.Boxes, wholeBox(t.Shape))
		}
	}
	if len(p.Boxes) != n {
		return fmt.Errorf("manifest tensor %q: %d boxes for %d files: %w", t.Name, len(p.Boxes), n, ErrVerify)
	}
	distinct, err := checkTiling(t.Shape, p.Boxes, p.Ranks)
	if err != nil {
		return fmt.Errorf("manifest tensor %q: %w", t.Name, err)
	}
	var reads, copies []piece
	for _, r := range p.holders(n) {
		// Tensor i is at position i of every file that holds all of
		// them; verifyFiles checked that rank r holds it.
		at := i
		if positions[r] != nil {
			at = positions[r][t.Name]
		}
		x := &index[r].Tensors[at]
		if x.DType != t.DType || !slices.Equal(intShape(x.Dims), p.Boxes[r].Shape) {
			return fmt.Errorf("%s: tensor %q is %s %v, the manifest says %s %v: %w", paths[r], t.Name, x.DType, x.Dims, t.DType, p.Boxes[r].Shape, ErrVerify)
		}
		pc := piece{rank: r, box: geomBox(p.Boxes[r]), t: x}
		if slices.Contains(distinct, r) {
			reads = append(reads, pc)
		} else {
			copies = append(copies, pc)
		}
	}
	g := geom(t.Shape)
	h := newTensorHash(t.DType, t.Shape)
	rowBytes := volume(g[1:]) * int64(elem)
	if volume(g) > 0 {
		if rowBytes > int64(len(band)) {
			return fmt.Errorf("tensor %q: one row along dim 0 needs %s twice, %s is given: %w", t.Name, bytesize.Format(rowBytes), bytesize.Format(2*int64(len(band))), ErrMemory)
		}
		rows := int(min(int64(g[0]), int64(len(band))/rowBytes))
		for lo := 0; lo < g[0]; lo += rows {
			if err := ctx.Err(); err != nil {
				return err
			}
			hi := min(g[0], lo+rows)
			box := bandBox(g, lo, hi)
			buf := band[:int64(hi-lo)*rowBytes]
			var sc []byte
			if needsScratch(reads, g) {
				sc = scratch[:len(buf)]
			}
			if err := fillBand(ctx, files, reads, g, box, buf, sc, elem, opt.Workers); err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			for _, c := range copies {
				if err := compareCopy(c, box, buf, files, elem, scratch, paths); err != nil {
					return err
				}
			}
			h.Write(buf)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != t.SHA256 {
		return fmt.Errorf("tensor %q: content sha256 %s, the manifest says %s: %w", t.Name, got, t.SHA256, ErrVerify)
	}
	return nil
}

// compareCopy checks that rank c's copy of a shared box holds the band's
// bytes.
func compareCopy(c piece, box parallel.Box, buf []byte, files []*os.File, elem int, scratch []byte, paths []string) error {
	common, ok := c.box.Intersect(box)
	if !ok {
		return nil
	}
	e := int64(elem)
	size := volume(common.Shape) * e
	sc := scratch[:size]
	// The rows of a box are contiguous in its file.
	start := int64(common.Offset[0]-c.box.Offset[0]) * volume(c.box.Shape[1:]) * e
	if err := c.t.ReadAt(files[c.rank], sc, start); err != nil {
		return fmt.Errorf("verify %s: %w", paths[c.rank], err)
	}
	return forEachRun(common, c.box, box, func(copyOff, bandOff, n int64) error {
		at := copyOff*e - start
		if !bytes.Equal(sc[at:at+n*e], buf[bandOff*e:(bandOff+n)*e]) {
			return fmt.Errorf("%s (rank %d): tensor %q differs from the copy other ranks hold near element %s: %w", paths[c.rank], c.rank, c.t.Name, strconv.FormatInt(copyOff, 10), ErrVerify)
		}
		return nil
	})
}
