package reshard

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/parallel"
)

// Run reshards src into target's ranks, writing one checkpoint per rank in
// outDir and then the manifest (see the package documentation for what is
// proved before the manifest is written). On error nothing in outDir looks
// complete and the sources are untouched.
func Run(ctx context.Context, src Source, target Target, outDir string, opt Options) (*Manifest, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	s, err := openSources(ctx, src.Files, opt)
	if err != nil {
		return nil, err
	}
	defer s.close()
	jobs, plan, err := resolve(s, src, target, opt)
	if err != nil {
		return nil, err
	}
	// Before the first byte: a run that cannot fit would fill the disk for
	// nothing.
	if err := checkSpace(outDir, plan.WriteBytes); err != nil {
		return nil, err
	}
	paths, err := prepareOutputs(outDir, plan.Files, s)
	if err != nil {
		return nil, err
	}

	m := &meter{limit: opt.MaxMemory}
	wbuf := plan.writeBuffer
	outs := make([]*outFile, 0, len(paths))
	var renamed []string
	var written atomic.Int64
	progress := func() {
		if opt.Progress != nil {
			opt.Progress(written.Load(), plan.WriteBytes)
		}
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		for _, o := range outs {
			o.discard()
		}
		for _, p := range renamed {
			os.Remove(p)
		}
	}()
	for _, p := range paths {
		if err := m.grow(int64(wbuf), "write buffer of "+p); err != nil {
			return nil, err
		}
		o, err := createOut(p, wbuf, &written)
		if err != nil {
			return nil, err
		}
		outs = append(outs, o)
	}

	files := s.files
	manifest := &Manifest{Format: ManifestFormat, Ranks: target.Ranks, ReplicatedRule: opt.ReplicatedRule, CRCTrailer: opt.CRC}
	// One arena for every tensor's bands, reused by the check after: no
	// garbage per tensor, so the process stays near the planned memory.
	if err := m.grow(plan.arena, "bands"); err != nil {
		return nil, err
	}
	bufs := &buffers{arena: make([]byte, plan.arena)}
	if plan.mean {
		if err := m.grow(meanBufferBytes, "mean rule buffers"); err != nil {
			return nil, err
		}
		bufs.meanInput, bufs.sums = make([]byte, meanChunk*8), make([]float64, meanChunk)
	}
	for _, j := range jobs {
		sum, err := streamTensor(ctx, j, files, outs, bufs, progress, opt)
		if err != nil {
			return nil, err
		}
		mt := ManifestTensor{Name: j.name, DType: j.dtype, Shape: j.shape, Bytes: volume(j.shape) * int64(j.elem), SHA256: sum, Rule: j.rule}
		if tp := placementOf(target.Placements, j.name); tp.Boxes != nil {
			mt.Boxes = j.dstShapesBoxes()
		}
		if j.held != nil {
			mt.Ranks = placementOf(target.Placements, j.name).Ranks
		}
		manifest.Tensors = append(manifest.Tensors, mt)
	}

	// Trailers, flushes and fsyncs, the files in parallel.
	crcs := make([]uint32, len(outs))
	err = forEach(ctx, len(outs), opt.Workers, func(r int) error {
		var err error
		crcs[r], err = outs[r].finish(opt.CRC)
		return err
	})
	if err != nil {
		return nil, err
	}
	m.shrink(int64(wbuf) * int64(len(outs)))
	progress()
	for r := range outs {
		manifest.Files = append(manifest.Files, ManifestFile{Rank: r, Path: filepath.ToSlash(plan.Files[r]), Bytes: plan.FileBytes[r], CRC32: fmt.Sprintf("%08x", crcs[r])})
	}
	for _, o := range outs {
		// Readable by all, as training writes its checkpoints (the
		// temporary file was private).
		if err := os.Chmod(o.f.Name(), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", o.path, err)
		}
		if err := atomicfile.CheckTarget(o.path); err != nil {
			return nil, err
		}
		if err := os.Rename(o.f.Name(), o.path); err != nil {
			return nil, fmt.Errorf("write %s: %w", o.path, err)
		}
		renamed = append(renamed, o.path)
	}
	outs = nil
	for _, dir := range uniqueDirs(paths) {
		syncDir(dir)
	}

	if testHookWritten != nil {
		testHookWritten(paths)
	}
	if err := checkWritten(ctx, outDir, manifest, opt, bufs.arena); err != nil {
		return nil, fmt.Errorf("check what was written: %w", err)
	}
	if target.Strategy != "" {
		if manifest.Strategy, err = strategyEntry(ctx, outDir, target.Strategy); err != nil {
			return nil, err
		}
	}
	manifest.Stats = &RunStats{SourceBytes: plan.SourceBytes, ReadBytes: plan.ReadBytes, WriteBytes: plan.WriteBytes, PeakMemory: m.peak}
	if err := writeManifest(outDir, manifest); err != nil {
		return nil, err
	}
	ok = true
	return manifest, nil
}

// checkSpace is atomicfile.CheckSpace; a test replaces it to reach a full
// disk in the middle of a run.
var checkSpace = atomicfile.CheckSpace

// testHookWritten, when set by a test, is called with the output files'
// paths once they are written and synced, before Run checks them.
var testHookWritten func(paths []string)

// checkWritten proves the files Run wrote: the content hashes in m were
// computed from the very bands the files were written from, so re-reading
// the files and checking the CRC-32 computed while writing them shows they
// hold those bytes; VerifyOutputSHA256 re-hashes every tensor as well.
func checkWritten(ctx context.Context, dir string, m *Manifest, opt Options, arena []byte) error {
	if opt.VerifyOutput == VerifyOutputSHA256 {
		return verifySet(ctx, dir, m, opt, arena)
	}
	set, err := verifyFiles(ctx, dir, m, opt)
	if err != nil {
		return err
	}
	set.close()
	return nil
}

// Merge integrates src into one checkpoint holding every tensor whole,
// written as outDir/name with the manifest next to it: what MindSpore's
// merge_sliced_parameter and save_checkpoint make of a sliced set.
func Merge(ctx context.Context, src Source, outDir, name string, opt Options) (*Manifest, error) {
	return Run(ctx, src, Target{Ranks: 1, Files: []string{name}}, outDir, opt)
}

// dstShapesBoxes returns the boxes of the target ranks that hold the
// tensor, in logical form (a scalar's box has no dimensions).
func (j *job) dstShapesBoxes() []manifestBox {
	out := make([]manifestBox, 0, len(j.dst))
	for r, d := range j.dst {
		switch {
		case !j.holds(r):
		case len(j.shape) == 0:
			out = append(out, manifestBox{Offset: []int{}, Shape: []int{}})
		default:
			out = append(out, manifestBox{Offset: d.Offset, Shape: d.Shape})
		}
	}
	return out
}

// buffers are a run's memory for tensor data besides the write buffers:
// the arena holds two bands, so that the next band is read while the last
// one is hashed and written, and the scatter buffer; the mean rule reads
// and sums in fixed chunks.
type buffers struct {
	arena     []byte
	meanInput []byte
	sums      []float64
}

// filledBand is a band read by streamTensor's reader.
type filledBand struct {
	slot int
	box  parallel.Box
	buf  []byte
}

// streamTensor writes one tensor to every output file, band by band, and
// returns its content hash. One goroutine reads bands into two alternating
// buffers while this one hashes and writes the previous band.
func streamTensor(ctx context.Context, j *job, files []*os.File, outs []*outFile, bufs *buffers, progress func(), opt Options) (string, error) {
	h := newTensorHash(j.dtype, j.shape)
	for r, o := range outs {
		if !j.holds(r) {
			continue
		}
		if err := o.begin(j.name, j.dstShapes[r], j.dtype, volume(j.dst[r].Shape)*int64(j.elem), opt.SliceBytes); err != nil {
			return "", err
		}
	}
	g := geom(j.shape)
	bandBytes := int64(j.bandRows) * j.rowBytes
	bands := [2][]byte{bufs.arena[:bandBytes], bufs.arena[bandBytes : 2*bandBytes]}
	var scratch []byte
	// An empty tensor has no band to compare (and no room planned for one).
	if j.rule != RuleMean && needsScratch(j.reads, g) || len(j.copies) > 0 && volume(g) > 0 {
		scratch = bufs.arena[2*bandBytes : 3*bandBytes]
	}
	if volume(g) > 0 {
		readCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		filled := make(chan filledBand)
		free := make(chan int, 2)
		free <- 0
		free <- 1
		var readErr error
		go func() {
			defer close(filled)
			for lo := 0; lo < g[0]; lo += j.bandRows {
				var slot int
				select {
				case slot = <-free:
				case <-readCtx.Done():
					readErr = readCtx.Err()
					return
				}
				hi := min(g[0], lo+j.bandRows)
				box := bandBox(g, lo, hi)
				buf := bands[slot][:volume(box.Shape)*int64(j.elem)]
				err := readBand(readCtx, j, files, g, box, buf, scratch, bufs, opt)
				if err != nil {
					readErr = err
					return
				}
				select {
				case filled <- filledBand{slot: slot, box: box, buf: buf}:
				case <-readCtx.Done():
					readErr = readCtx.Err()
					return
				}
			}
		}()
		var writeErr error
		for b := range filled {
			if writeErr == nil {
				if writeErr = writeBand(ctx, j, b.box, b.buf, outs, h, opt.Workers); writeErr != nil {
					cancel()
				} else {
					progress()
				}
			}
			free <- b.slot
		}
		if writeErr != nil {
			return "", writeErr
		}
		if readErr != nil {
			return "", readErr
		}
	}
	for r, o := range outs {
		if !j.holds(r) {
			continue
		}
		if err := o.end(); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readBand fills buf with the tensor's rows in box.
func readBand(ctx context.Context, j *job, files []*os.File, g []int, box parallel.Box, buf, scratch []byte, bufs *buffers, opt Options) error {
	if j.rule == RuleMean {
		if err := meanBand(files, j.reads, j.dtype, box.Offset[0], j.rowBytes, buf, bufs.meanInput, bufs.sums); err != nil {
			return fmt.Errorf("read for the mean: %w", err)
		}
		return nil
	}
	if err := fillBand(ctx, files, j.reads, g, box, buf, scratch, j.elem, opt.Workers); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return compareCopies(j, files, box, buf, scratch)
}

// compareCopies checks that the other ranks' copies of a replicated tensor
// hold buf, rows box of rank 0's copy; scratch is as large as buf (a
// replicated tensor needs no scatter buffer, so the slot is free).
func compareCopies(j *job, files []*os.File, box parallel.Box, buf, scratch []byte) error {
	start := int64(box.Offset[0]) * j.rowBytes
	for _, c := range j.copies {
		sc := scratch[:len(buf)]
		if err := c.t.ReadAt(files[c.rank], sc, start); err != nil {
			return fmt.Errorf("read rank %d's copy: %w", c.rank, err)
		}
		if bytes.Equal(sc, buf) {
			continue
		}
		i := 0
		for sc[i] == buf[i] {
			i++
		}
		return fmt.Errorf("%s (rank %d): tensor %q has no layout, so every rank should hold it whole and equal, but this copy differs from rank 0's at byte %d: give the strategy file that splits it, or the mean rule (--bn-stats mean) to average the ranks: %w",
			files[c.rank].Name(), c.rank, j.name, start+int64(i), ErrSource)
	}
	return nil
}

// writeBand hashes the band while appending each target rank's part of it
// to that rank's file.
func writeBand(ctx context.Context, j *job, box parallel.Box, buf []byte, outs []*outFile, h io.Writer, workers int) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.Write(buf)
	}()
	e := int64(j.elem)
	err := forEach(ctx, len(outs), workers, func(r int) error {
		if !j.holds(r) {
			return nil
		}
		common, ok := j.dst[r].Intersect(box)
		if !ok {
			return nil
		}
		return forEachRun(common, box, j.dst[r], func(bandOff, _, n int64) error {
			return outs[r].write(buf[bandOff*e : (bandOff+n)*e])
		})
	})
	wg.Wait()
	return err
}

// prepareOutputs creates outDir, resolves the output paths inside it,
// refuses any that is a source file, and removes an earlier manifest so
// that the directory does not look complete while files are replaced.
func prepareOutputs(outDir string, names []string, s *sources) ([]string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	var paths []string
	seen := make(map[string]int)
	for r, name := range append(append([]string(nil), names...), ManifestName) {
		p, err := userfile.Within(outDir, name)
		if err != nil {
			return nil, fmt.Errorf("output file %q: %w", name, err)
		}
		if q, dup := seen[filepath.Clean(p)]; dup {
			return nil, fmt.Errorf("output file %q is given for ranks %d and %d", name, q, r)
		}
		seen[filepath.Clean(p)] = r
		if info, err := os.Stat(p); err == nil {
			for q, f := range s.files {
				if fi, err := f.Stat(); err == nil && os.SameFile(fi, info) {
					return nil, fmt.Errorf("output file %s is source rank %d's file %s: refusing to overwrite an input", p, q, s.paths[q])
				}
			}
		}
		if r < len(names) {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, fmt.Errorf("create output directory: %w", err)
			}
			paths = append(paths, p)
		}
	}
	manifest := filepath.Join(outDir, ManifestName)
	if err := os.Remove(manifest); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove the earlier manifest: %w", err)
	}
	syncDir(outDir)
	return paths, nil
}

func uniqueDirs(paths []string) []string {
	var dirs []string
	seen := make(map[string]bool)
	for _, p := range paths {
		if d := filepath.Dir(p); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// syncDir makes renames in dir durable; file systems that refuse fsync on
// a directory are not worth failing for.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
