package shard

import "errors"

// ErrConfig is wrapped by errors about a Config or a model name.
var ErrConfig = errors.New("invalid sharded network config")
