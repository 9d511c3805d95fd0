// Package userfile reads files whose names come from users — specs, rank
// tables, checkpoints, paths in run.json — with the bounds mspipe promises:
// only regular files (a device, FIFO, socket or directory is refused at
// once, without blocking on it), a size limit checked before and while
// reading, reads that stop when their context is cancelled, and paths
// confined to the directory they were named relative to.
//
// Errors wrap one of the package's sentinel errors, so callers can tell
// "not a regular file" from "too large" from "outside the directory" with
// errors.Is. Like io errors they leave naming the file to the caller
// (os errors from opening it name it already).
package userfile
