package ckpt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/mspipe/mspipe/internal/atomicfile"
)

// DefaultPrefix is ModelCheckpoint's default file name prefix.
const DefaultPrefix = "CKP"

// MindSpore's CheckpointConfig defaults.
const (
	defaultSaveCheckpointSteps = 1
	defaultKeepCheckpointMax   = 5
)

// CheckpointConfig is MindSpore's CheckpointConfig, for the step-based
// policy. Zero fields take MindSpore's defaults.
type CheckpointConfig struct {
	// SaveCheckpointSteps saves every N steps; 0 means 1.
	SaveCheckpointSteps int
	// KeepCheckpointMax keeps at most N files of the prefix, deleting the
	// oldest; 0 means 5. (MindSpore turns an explicit 0 into 1; write 1.)
	KeepCheckpointMax int
	// ReusePrefix keeps the prefix even when the directory already holds
	// checkpoints with it, instead of moving on to prefix_1, prefix_2...;
	// a resumed run uses it to continue the same series of files.
	ReusePrefix bool
	// Write is passed to Write for every checkpoint.
	Write WriteOptions
	// AsyncSave is CheckpointConfig's async_save: StepEnd and End take the
	// tensors (which the caller's params function must return as copies
	// no training step changes) and a writer goroutine encodes and commits
	// them, with the same bytes and sidecar as a synchronous save. At most
	// one write is in flight: a save that finds the previous one unfinished
	// waits for it (LastWait says how long) before it calls params, so
	// params may copy into the buffers it returned the time before (one
	// staging buffer, reused). Call Wait before reading Latest, and before
	// the process ends.
	AsyncSave bool
}

// ModelCheckpoint saves checkpoints during training with MindSpore's
// ModelCheckpoint rules: files {prefix}-{epoch}_{step}.ckpt in one directory,
// every SaveCheckpointSteps steps and at the end of training, at most
// KeepCheckpointMax of them kept. It is not safe for concurrent use.
type ModelCheckpoint struct {
	dir       string
	prefix    string
	saveSteps int
	keepMax   int
	write     WriteOptions
	lastStep  int    // global step of the last save (_last_triggered_step)
	latest    string // path of the last file written
	async     bool
	// inFlight is the asynchronous write not yet waited for, or nil.
	inFlight *pendingWrite
	// lastWait is how long the last save waited for the previous write.
	lastWait time.Duration
	// staged and peakStaged count the host memory holding tensors handed
	// to the writer (the one checkpoint in flight), now and at most.
	staged, peakStaged int64
	// scratch is the encoder's buffer, kept from one write to the next
	// (one message, the largest tensor's at most). Writes never overlap:
	// an asynchronous one is waited for before the next save or breakpoint.
	scratch []byte
}

// pendingWrite is one asynchronous write: done is closed when err is set.
type pendingWrite struct {
	path  string
	bytes int64
	done  chan struct{}
	err   error
}

// NewModelCheckpoint prepares checkpointing into dir (created if missing)
// with the given prefix ("" means DefaultPrefix). Unless cfg.ReusePrefix is
// set, the prefix is changed as MindSpore does when dir already holds files
// of it (see ResolvePrefix). It removes what saves of the prefix killed
// before their rename left in dir (temporary files no reader takes).
func NewModelCheckpoint(prefix, dir string, cfg CheckpointConfig) (*ModelCheckpoint, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsRune(prefix, '/') {
		return nil, fmt.Errorf("checkpoint prefix %q: must not contain '/'", prefix)
	}
	if cfg.SaveCheckpointSteps < 0 {
		return nil, fmt.Errorf("save_checkpoint_steps %d: must not be negative", cfg.SaveCheckpointSteps)
	}
	if cfg.KeepCheckpointMax < 0 {
		return nil, fmt.Errorf("keep_checkpoint_max %d: must not be negative", cfg.KeepCheckpointMax)
	}
	m := &ModelCheckpoint{
		dir:       dir,
		prefix:    prefix,
		saveSteps: cfg.SaveCheckpointSteps,
		keepMax:   cfg.KeepCheckpointMax,
		write:     cfg.Write,
		async:     cfg.AsyncSave,
	}
	if m.saveSteps == 0 {
		m.saveSteps = defaultSaveCheckpointSteps
	}
	if m.keepMax == 0 {
		m.keepMax = defaultKeepCheckpointMax
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	if err := removeKilledSaves(dir, prefix); err != nil {
		return nil, err
	}
	if !cfg.ReusePrefix {
		p, err := ResolvePrefix(dir, prefix)
		if err != nil {
			return nil, err
		}
		m.prefix = p
	}
	return m, nil
}

// removeKilledSaves deletes the temporary files that saves of the prefix's
// series (prefix, prefix_1, ...) left in dir when their process was killed
// before the rename. No reader takes them for checkpoints, but each holds
// the space of one; a new ModelCheckpoint is the series' only writer now.
func removeKilledSaves(dir, prefix string) error {
	stale, err := atomicfile.Leftovers(dir, func(target string) bool {
		target = strings.TrimSuffix(target, DigestExt)
		if stem, found := strings.CutSuffix(target, BreakpointSuffix); found {
			target = stem + ".ckpt"
		}
		p, _, _, ok := ParseFileName(target)
		if !ok || p == prefix {
			return ok
		}
		n, found := strings.CutPrefix(p, prefix+"_")
		_, digits := atoiDigits(n)
		return found && digits
	})
	if err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove what a killed save left: %w", err)
		}
	}
	return nil
}

// Prefix returns the prefix in use, after any renaming.
func (m *ModelCheckpoint) Prefix() string { return m.prefix }

// Dir returns the checkpoint directory.
func (m *ModelCheckpoint) Dir() string { return m.dir }

// Latest returns the path of the last checkpoint this ModelCheckpoint wrote
// and committed, or "" (MindSpore's latest_ckpt_file_name). With AsyncSave
// a write still in flight is not counted: call Wait first.
func (m *ModelCheckpoint) Latest() string { return m.latest }

// Wait blocks until the asynchronous write in flight (if any) is committed
// and its old files pruned, and returns its error, which names the file.
// It returns how long it waited. Without AsyncSave it returns at once.
func (m *ModelCheckpoint) Wait() (time.Duration, error) {
	p := m.inFlight
	if p == nil {
		return 0, nil
	}
	began := time.Now()
	<-p.done
	waited := time.Since(began)
	m.inFlight = nil
	m.staged -= p.bytes
	if p.err != nil {
		return waited, p.err
	}
	m.latest = p.path
	return waited, nil
}

// LastWait is how long the last StepEnd or End that saved waited for the
// previous asynchronous write to finish (0 without AsyncSave).
func (m *ModelCheckpoint) LastWait() time.Duration { return m.lastWait }

// PeakStaged is the most host memory (bytes of tensor data) that tensors
// handed to the asynchronous writer held at once: at most one checkpoint,
// since a save waits for the previous write before staging its own.
func (m *ModelCheckpoint) PeakStaged() int64 { return m.peakStaged }

// ResumeAt records that training resumes after global step step, whose
// checkpoint already exists, so the save schedule continues as it would
// have without the interruption.
func (m *ModelCheckpoint) ResumeAt(step int) { m.lastStep = step }

// StepEnd is ModelCheckpoint.step_end: call it after every training step,
// with the 1-based epoch, the 1-based global step counted across epochs, and
// the number of steps in an epoch. When SaveCheckpointSteps steps have passed
// since the last save it calls params and writes
// {prefix}-{epoch}_{step in epoch}.ckpt, then deletes the oldest files beyond
// KeepCheckpointMax. It returns the path written, or "" when no save was due.
// A failed deletion is reported after the new file has been written.
func (m *ModelCheckpoint) StepEnd(epoch, step, stepsPerEpoch int, params func() ([]Tensor, error)) (string, error) {
	return m.save(epoch, step, stepsPerEpoch, params, false)
}

// End is ModelCheckpoint.end: it saves the final step unless that step was
// just saved.
func (m *ModelCheckpoint) End(epoch, step, stepsPerEpoch int, params func() ([]Tensor, error)) (string, error) {
	return m.save(epoch, step, stepsPerEpoch, params, true)
}

func (m *ModelCheckpoint) save(epoch, step, stepsPerEpoch int, params func() ([]Tensor, error), force bool) (string, error) {
	if epoch < 1 || step < 1 || stepsPerEpoch < 1 {
		return "", fmt.Errorf("checkpoint at epoch %d step %d (%d steps per epoch): all must be positive", epoch, step, stepsPerEpoch)
	}
	if step == m.lastStep {
		return "", nil
	}
	if !force && step < m.lastStep+m.saveSteps {
		return "", nil
	}
	m.lastWait = 0
	if m.async {
		// The staging buffer holds one checkpoint: the previous write must
		// be done before params copies this one's tensors, so that the
		// copy can go into the buffers the finished write read from.
		waited, err := m.Wait()
		m.lastWait = waited
		if err != nil {
			return "", err
		}
	}
	tensors, err := params()
	if errors.Is(err, ErrSkipSave) {
		m.lastStep = step
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	stepInEpoch := (step-1)%stepsPerEpoch + 1
	path := filepath.Join(m.dir, FileName(m.prefix, epoch, stepInEpoch))
	if m.async {
		m.lastStep = step
		m.startWrite(path, tensors)
		return path, nil
	}
	if err := m.commit(path, tensors); err != nil {
		return "", err
	}
	m.lastStep = step
	m.latest = path
	return path, nil
}

// commit writes one checkpoint and prunes the series. Unlike MindSpore,
// which deletes the oldest file before saving, it writes first: a failed
// save then costs no old checkpoint.
func (m *ModelCheckpoint) commit(path string, tensors []Tensor) error {
	if err := write(path, tensors, m.write, &m.scratch); err != nil {
		return err
	}
	return m.prune()
}

// startWrite hands tensors to a writer goroutine that commits them to path.
// The goroutine reads only what it is given and the fields set at
// construction (dir, prefix, keepMax, write), which never change, and
// uses scratch, which nothing else touches until Wait has seen it done.
func (m *ModelCheckpoint) startWrite(path string, tensors []Tensor) {
	p := &pendingWrite{path: path, done: make(chan struct{})}
	for _, t := range tensors {
		p.bytes += int64(len(t.Data))
	}
	m.staged += p.bytes
	m.peakStaged = max(m.peakStaged, m.staged)
	m.inFlight = p
	go func() {
		defer close(p.done)
		p.err = m.commit(path, tensors)
	}()
}

// BreakpointSuffix ends the name of the checkpoint exception_save writes:
// {prefix}-{epoch}_{step}_breakpoint.ckpt, as MindSpore names it. Such
// files are not of the series (ListCheckpoints, Latest and pruning skip
// them).
const BreakpointSuffix = "_breakpoint.ckpt"

// BreakpointName returns the name of the exception_save checkpoint of the
// given epoch and step in epoch.
func BreakpointName(prefix string, epoch, stepInEpoch int) string {
	return strings.TrimSuffix(FileName(prefix, epoch, stepInEpoch), ".ckpt") + BreakpointSuffix
}

// SaveBreakpoint is exception_save: it writes tensors, the last good state
// (after global step step), to {prefix}-{epoch}_{step in epoch}_breakpoint.ckpt,
// atomically and with the series' write options (its sidecar digest), once
// any write in flight is done. A write in flight that failed is reported
// with the breakpoint's own result.
func (m *ModelCheckpoint) SaveBreakpoint(epoch, step, stepsPerEpoch int, tensors []Tensor) (string, error) {
	if epoch < 1 || step < 1 || stepsPerEpoch < 1 {
		return "", fmt.Errorf("breakpoint checkpoint at epoch %d step %d (%d steps per epoch): all must be positive", epoch, step, stepsPerEpoch)
	}
	_, inFlightErr := m.Wait()
	path := filepath.Join(m.dir, BreakpointName(m.prefix, epoch, (step-1)%stepsPerEpoch+1))
	if err := write(path, tensors, m.write, &m.scratch); err != nil {
		return "", errors.Join(err, inFlightErr)
	}
	return path, inFlightErr
}

// prune deletes the oldest files of the prefix until KeepCheckpointMax remain.
func (m *ModelCheckpoint) prune() error {
	files, err := ListCheckpoints(m.dir, m.prefix)
	if err != nil {
		return err
	}
	for i := 0; len(files)-i > m.keepMax; i++ {
		// The sidecar first: a digest without its checkpoint is harmless,
		// the other way round would leave a file resume cannot verify.
		for _, p := range []string{DigestPath(files[i].Path), files[i].Path} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove old checkpoint: %w", err)
			}
		}
	}
	return nil
}

// ErrSkipSave, returned by the params function of StepEnd or End, keeps
// the save schedule as if the checkpoint had been written but writes
// nothing: a rank that takes part in gathering an integrated checkpoint
// another rank writes.
var ErrSkipSave = errors.New("checkpoint written by another rank")

// FileName returns ModelCheckpoint's file name {prefix}-{epoch}_{step}.ckpt.
func FileName(prefix string, epoch, stepInEpoch int) string {
	return prefix + "-" + strconv.Itoa(epoch) + "_" + strconv.Itoa(stepInEpoch) + ".ckpt"
}

// ParseFileName splits a name of the form {prefix}-{epoch}_{step}.ckpt; the
// prefix may itself contain '-'.
func ParseFileName(name string) (prefix string, epoch, stepInEpoch int, ok bool) {
	stem, found := strings.CutSuffix(name, ".ckpt")
	if !found {
		return "", 0, 0, false
	}
	dash := strings.LastIndexByte(stem, '-')
	if dash < 0 {
		return "", 0, 0, false
	}
	e, s, found := strings.Cut(stem[dash+1:], "_")
	if !found {
		return "", 0, 0, false
	}
	epoch, ok1 := atoiDigits(e)
	stepInEpoch, ok2 := atoiDigits(s)
	if !ok1 || !ok2 {
		return "", 0, 0, false
	}
	return stem[:dash], epoch, stepInEpoch, true
}

// atoiDigits parses a non-empty run of ASCII digits that fits an int.
func atoiDigits(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// ResolvePrefix is MindSpore's rule for a prefix already in use
// (_chg_ckpt_file_name_if_same_exist): it looks at the .ckpt files in dir
// (not *_breakpoint.ckpt) that start with prefix followed by a non-letter.
// A file {prefix}-... makes the new prefix at least {prefix}_1; a file
// {prefix}_N-... makes it at least {prefix}_{N+1}. With no such file the
// prefix is unchanged. A missing dir leaves the prefix unchanged.
func ResolvePrefix(dir, prefix string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return prefix, nil
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint directory: %w", err)
	}
	pre := []rune(prefix)
	suffix := 0
	for _, e := range entries {
		name := e.Name()
		if pyExt(name) != ".ckpt" || strings.HasSuffix(name, "_breakpoint.ckpt") || !strings.HasPrefix(name, prefix) {
			continue
		}
		rest := []rune(name)[len(pre):]
		if len(rest) == 0 || unicode.IsLetter(rest[0]) {
			continue
		}
		dash := indexRune(rest, '-')
		switch {
		case dash == 0:
			suffix = max(suffix, 1)
		case dash > 0:
			if n, ok := atoiDigits(string(rest[1:dash])); ok && n < int(^uint(0)>>1) {
				suffix = max(suffix, n+1)
			}
		}
	}
	if suffix == 0 {
		return prefix, nil
	}
	return prefix + "_" + strconv.Itoa(suffix), nil
}

func indexRune(rs []rune, r rune) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}

// pyExt is Python's os.path.splitext(name)[1]: leading dots do not start an
// extension, so ".ckpt" has none.
func pyExt(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || strings.Trim(name[:i], ".") == "" {
		return ""
	}
	return name[i:]
}

// CheckpointFile is one checkpoint file found by ListCheckpoints.
type CheckpointFile struct {
	Path    string
	Epoch   int // 0 when the name does not end in -{epoch}_{step}.ckpt
	Step    int // step in epoch; 0 when the name does not parse
	ModTime time.Time
}

// ListCheckpoints returns the files MindSpore's CheckpointManager counts for
// prefix in dir (names {prefix}-*.ckpt with no letter after the prefix),
// oldest first: by modification time, then epoch and step, then name.
func ListCheckpoints(dir, prefix string) ([]CheckpointFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var files []CheckpointFile
	for _, e := range entries {
		name := e.Name()
		if pyExt(name) != ".ckpt" || !strings.HasPrefix(name, prefix+"-") {
			continue
		}
		if strings.IndexFunc(name[len(prefix):len(name)-len(".ckpt")], unicode.IsLetter) >= 0 {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir
		}
		if err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		f := CheckpointFile{Path: filepath.Join(dir, name), ModTime: info.ModTime()}
		if p, ep, st, ok := ParseFileName(name); ok && p == prefix {
			f.Epoch, f.Step = ep, st
		}
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool {
		a, b := files[i], files[j]
		if !a.ModTime.Equal(b.ModTime) {
			return a.ModTime.Before(b.ModTime)
		}
		if a.Epoch != b.Epoch {
			return a.Epoch < b.Epoch
		}
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		return a.Path < b.Path
	})
	return files, nil
}

// Latest returns the newest checkpoint of prefix in dir, to resume from.
// It considers {prefix}-{epoch}_{step}.ckpt and the renamed series
// {prefix}_{N}-{epoch}_{step}.ckpt that ResolvePrefix creates, and picks the
// highest (N, epoch, step), N being 0 for the plain prefix. Names, not
// modification times, decide, because copying a directory changes the times.
// With no checkpoint it returns an error wrapping ErrNoCheckpoint.
func Latest(dir, prefix string) (string, error) {
	all, err := NewestFirst(dir, prefix)
	if err != nil {
		return "", err
	}
	return all[0], nil
}

// Skipped is a checkpoint LatestValid passed over, and why.
type Skipped struct {
	Path string
	Err  error
}

// LatestValid is Latest for resuming: it returns the newest checkpoint that
// reads and verifies (ReadVerified: its crc_num trailer or its sidecar
// digest, and its whole structure), with the tensors it holds, and lists the newer ones it
// skipped. A torn or damaged newest file then costs one interval of work,
// not the run.
func LatestValid(dir, prefix string) (path string, tensors []Tensor, skipped []Skipped, err error) {
	all, err := NewestFirst(dir, prefix)
	if err != nil {
		return "", nil, nil, err
	}
	for _, p := range all {
		f, rerr := ReadVerified(p)
		if rerr == nil {
			return p, f.Tensors, skipped, nil
		}
		skipped = append(skipped, Skipped{Path: p, Err: rerr})
	}
	return "", nil, skipped, fmt.Errorf("%s in %s: %w: all %d checkpoints are damaged (newest: %v)", prefix, dir, ErrNoCheckpoint, len(all), skipped[0].Err)
}

// NewestFirst lists the checkpoints Latest considers, newest first; with
// none it returns an error wrapping ErrNoCheckpoint.
func NewestFirst(dir, prefix string) ([]string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("find latest checkpoint: %w", err)
	}
	type candidate struct {
		path string
		key  [3]int
	}
	var found []candidate
	for _, e := range entries {
		p, ep, st, ok := ParseFileName(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		series := 0
		if p != prefix {
			n, found := strings.CutPrefix(p, prefix+"_")
			if !found {
				continue
			}
			if series, ok = atoiDigits(n); !ok {
				continue
			}
		}
		found = append(found, candidate{filepath.Join(dir, e.Name()), [3]int{series, ep, st}})
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%s in %s: %w", prefix, dir, ErrNoCheckpoint)
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := found[i].key, found[j].key
		for k := range a {
			if a[k] != b[k] {
				return a[k] > b[k]
			}
		}
		return found[i].path > found[j].path
	})
	paths := make([]string, len(found))
	for i, c := range found {
		paths[i] = c.path
	}
	return paths, nil
}
