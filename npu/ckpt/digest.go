package ckpt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
)

// DigestExt is appended to a checkpoint's name for its sidecar digest file:
// CKP-1_5.ckpt has CKP-1_5.ckpt.sha256 beside it. The sidecar holds one
// line in sha256sum's format ("{hex}  {name}"), so `sha256sum -c` checks it
// too. It lets a series be verified on resume while the checkpoint itself
// stays the plain protobuf MindSpore writes by default (no crc_num trailer).
const DigestExt = ".sha256"

// maxDigestBytes bounds the read of a sidecar: one line with a long name.
const maxDigestBytes = 64 << 10

// DigestPath returns the sidecar digest file of the checkpoint at path.
func DigestPath(path string) string { return path + DigestExt }

// writeDigest atomically writes the sidecar of the checkpoint at path.
func writeDigest(path string, sum []byte) error {
	line := hex.EncodeToString(sum) + "  " + filepath.Base(path) + "\n"
	if err := atomicfile.WriteFile(DigestPath(path), []byte(line), 0o644); err != nil {
		return fmt.Errorf("write checkpoint digest: %w", err)
	}
	return nil
}

// removeDigest removes a sidecar left by an earlier write of path, which
// would no longer describe the file.
func removeDigest(path string) error {
	if err := os.Remove(DigestPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the stale digest of %s: %w", path, err)
	}
	return nil
}

// checkDigest compares data, the bytes of the checkpoint at path, with its
// sidecar. It reports whether a sidecar was there; a sidecar that cannot be
// parsed or does not match is an *Error wrapping ErrDigest.
func checkDigest(path string, data []byte) (bool, error) {
	side := DigestPath(path)
	raw, err := userfile.ReadFile(context.Background(), side, maxDigestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read checkpoint digest: %w", err)
	}
	field, _, _ := strings.Cut(strings.TrimSpace(string(raw)), " ")
	want, err := hex.DecodeString(field)
	if err != nil || len(want) != sha256.Size {
		return true, &Error{File: side, Value: -1, Offset: 0, Err: fmt.Errorf("%w: not a sha256sum line (64 hex digits, two spaces, the file name)", ErrDigest)}
	}
	got := sha256.Sum256(data)
	if string(got[:]) != string(want) {
		return true, &Error{File: path, Value: -1, Offset: -1, Err: fmt.Errorf("%w: %s says %x, the file has %x (damaged, or changed after it was written; delete the %s file if the change was meant)", ErrDigest, filepath.Base(side), want, got, DigestExt)}
	}
	return true, nil
}

// ReadVerified is ReadFile for a checkpoint whose integrity must be proven,
// as resuming from it needs: the file must carry a matching crc_num trailer
// or a matching sidecar digest. A file with neither (a save killed between
// the checkpoint and its sidecar) is an *Error wrapping ErrUnverified.
func ReadVerified(path string) (*File, error) {
	f, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !f.CRC && !f.Digest {
		return nil, &Error{File: path, Value: -1, Offset: -1, Err: fmt.Errorf("%w: no crc_num trailer and no %s beside it", ErrUnverified, DigestExt)}
	}
	return f, nil
}
