package main

import "errors"

// errConfig reports a benchmark setting out of range.
var errConfig = errors.New("invalid benchmark setting")
