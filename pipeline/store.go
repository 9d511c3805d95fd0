package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"
)

// Store is a directory of runs (by default ./runs).
type Store struct {
	Dir string
}

var runIDRe = regexp.MustCompile(`^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$`)

// newRunID returns a sortable, unique id: date-time plus random hex.
func newRunID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// RunDir returns the directory of a run id, checking the id's form so a
// user-supplied id cannot point outside the store.
func (s *Store) RunDir(id string) (string, error) {
	if !runIDRe.MatchString(id) {
		return "", fmt.Errorf("run id %q: %w (ids look like 20261123-054012-a1b2c3)", id, ErrRunNotFound)
	}
	dir := filepath.Join(s.Dir, id)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("run %s: %w", id, ErrRunNotFound)
	}
	return dir, nil
}

// Open returns the directory and state of a run as a reader sees it: a
// run whose run.json says running but whose owner is gone is
// StatusInterrupted.
func (s *Store) Open(id string) (string, *RunState, error) {
	dir, err := s.RunDir(id)
	if err != nil {
		return "", nil, err
	}
	st, err := LoadState(dir)
	if err != nil {
		return "", nil, err
	}
	observeOwner(dir, st)
	return dir, st, nil
}

// List returns the states of all runs, newest first, as Open sees them. Runs whose run.json is
// missing or corrupt are returned as errors beside the good ones.
func (s *Store) List() ([]*RunState, []error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{fmt.Errorf("list runs: %w", err)}
	}
	var runs []*RunState
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !runIDRe.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(s.Dir, e.Name())
		st, err := LoadState(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		observeOwner(dir, st)
		runs = append(runs, st)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID > runs[j].ID })
	return runs, errs
}

// Latest returns the newest run's id, or ErrRunNotFound.
func (s *Store) Latest() (string, error) {
	runs, _ := s.List()
	if len(runs) == 0 {
		return "", fmt.Errorf("no runs in %s: %w", s.Dir, ErrRunNotFound)
	}
	return runs[0].ID, nil
}

// runStates lists a store's runs for cache lookups, re-reading a run's
// run.json only when its inode, size or modification time changed since
// the last look (every save replaces the file): each stage of a run looks
// every earlier run up, and parsing each run.json for each stage cost
// about 0.4 ms per earlier run per stage. Runs made or changed meanwhile,
// by this mspipe or another, are seen at the next look.
type runStates struct {
	store *Store

	mu   sync.Mutex
	seen map[string]seenRun // by run id
}

// seenRun is a run.json as last read.
type seenRun struct {
	inode      uint64
	size       int64
	modifiedNs int64
	state      *RunState
}

func newRunStates(s *Store) *runStates {
	return &runStates{store: s, seen: map[string]seenRun{}}
}

// list returns the states of the store's runs whose run.json can be read,
// newest first, as Store.List does. The states are shared between calls:
// callers must not change them.
func (rs *runStates) list() []*RunState {
	if rs == nil || rs.store == nil {
		return nil
	}
	entries, err := os.ReadDir(rs.store.Dir)
	if err != nil {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	present := map[string]bool{}
	var runs []*RunState
	for _, e := range entries {
		if !e.IsDir() || !runIDRe.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(rs.store.Dir, e.Name())
		info, err := os.Stat(filepath.Join(dir, "run.json"))
		if err != nil {
			continue
		}
		present[e.Name()] = true
		cur := seenRun{inode: fileInode(info), size: info.Size(), modifiedNs: info.ModTime().UnixNano()}
		prev, ok := rs.seen[e.Name()]
		if !ok || cur.inode == 0 || prev.inode != cur.inode || prev.size != cur.size || prev.modifiedNs != cur.modifiedNs {
			st, err := LoadState(dir)
			if err != nil {
				delete(rs.seen, e.Name())
				continue
			}
			cur.state = st
			rs.seen[e.Name()] = cur
			prev = cur
		}
		observeOwner(dir, prev.state) // a live owner may have died since
		runs = append(runs, prev.state)
	}
	for id := range rs.seen {
		if !present[id] {
			delete(rs.seen, id)
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID > runs[j].ID })
	return runs
}
