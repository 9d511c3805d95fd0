package parallel

import "errors"

// Errors wrapped by this package's functions, for errors.Is.
var (
	// ErrUnknownMode is wrapped by errors about a mode name.
	ErrUnknownMode = errors.New("unknown parallel mode")
	// ErrLayout is wrapped by errors about a device matrix or tensor map.
	ErrLayout = errors.New("invalid layout")
	// ErrStrategy is wrapped by errors about a shard strategy.
	ErrStrategy = errors.New("invalid shard strategy")
	// ErrStrategyFile is wrapped by errors about the content of a strategy
	// file (strategy_ckpt_save_file) that is not about a layout or strategy.
	ErrStrategyFile = errors.New("invalid strategy file")
	// ErrOptimizerShard is wrapped by errors about an
	// optimizer_weight_shard_size that does not divide the ranks holding
	// a parameter's slice (see OptimizerPieces).
	ErrOptimizerShard = errors.New("invalid optimizer shard size")
)
