package job

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/collective"
)

// BlameFile is the file a rank whose collective failed because of a peer
// leaves in its device directory, naming that peer, so that the launcher
// can tell a hung rank from the ranks that gave up waiting for it. The
// stage removes a stale one before the job starts.
const BlameFile = "blame.json"

// blame is the content of BlameFile.
type blame struct {
	Rank  int    `json:"rank"` // the peer at fault
	Error string `json:"error"`
}

// leaveBlame writes BlameFile when err is a collective failure attributed
// to a peer; it is best effort, as the rank is failing anyway. The file is
// read only after this process has exited, and a stale one is removed
// before the job starts, so it needs no atomic write: an fsync here would
// delay the end of a failing job.
func leaveBlame(err error) {
	var pe *collective.PeerError
	if !errors.As(err, &pe) || collective.Relayed(err) {
		// A relayed abort's sender only passed on a failure elsewhere
		// (pipeline stage groups): it is no culprit.
		return
	}
	data, jerr := json.Marshal(blame{Rank: pe.JobRank(), Error: err.Error()})
	if jerr == nil {
		_ = os.WriteFile(BlameFile, data, 0o644)
	}
}

// ReadBlame returns the peer that the BlameFile in a rank's device
// directory dir names, and false when there is none.
func ReadBlame(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, BlameFile))
	if err != nil {
		return 0, false
	}
	var b blame
	if json.Unmarshal(data, &b) != nil || b.Rank < 0 {
		return 0, false
	}
	return b.Rank, true
}
