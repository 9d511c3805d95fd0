package auto

import "errors"

// Errors wrapped by this package's functions, for errors.Is.
var (
	// ErrMachine is wrapped by errors about a Machine's figures.
	ErrMachine = errors.New("invalid machine description")
	// ErrNoFit is wrapped when no strategy keeps every rank within the
	// device memory.
	ErrNoFit = errors.New("no strategy fits the device memory")
	// ErrGraph is wrapped by errors about a graph the cost model cannot
	// price (an empty chain, consecutive operators whose shapes differ).
	ErrGraph = errors.New("graph cannot be priced")
)
