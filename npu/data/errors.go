package data

import "errors"

// Sentinel errors, tested with errors.Is. Every error returned by this package
// that is caused by bad input wraps one of these and names the file (and the
// record, shard or field) where the problem is.
var (
	// ErrRecordSize: a batch file's size is not a whole number of records.
	ErrRecordSize = errors.New("file size is not a whole number of 3073-byte records")
	// ErrLabel: a record's label byte is above 9.
	ErrLabel = errors.New("label out of range")
	// ErrEmptyFile: a batch file holds no record at all.
	ErrEmptyFile = errors.New("no records")
	// ErrEmptyDir: a data set directory holds no .bin batch file.
	ErrEmptyDir = errors.New("no cifar-10 batch files")
	// ErrMissingFile: one of the standard batch files is absent.
	ErrMissingFile = errors.New("missing batch file")
	// ErrConfig: a pipeline, generator or shard setting is invalid.
	ErrConfig = errors.New("invalid data config")
	// ErrManifest: a manifest cannot be read or a data set does not match it.
	ErrManifest = errors.New("data set does not match its manifest")
)
