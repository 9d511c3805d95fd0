package ckptset

import "github.com/mspipe/mspipe/internal/userfile"

// ParseSize reads a byte count such as 512MiB (see userfile.ParseSize).
func ParseSize(s string) (int64, error) { return userfile.ParseSize(s) }
