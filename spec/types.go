package spec

import (
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"
)

// SupportedVersion is the only spec `version` this build reads.
const SupportedVersion = 1

// Pipeline is a decoded spec file.
type Pipeline struct {
	File string // path as given to Load, used in every position
	// BaseDir is the directory relative paths in the spec (rank tables,
	// plugin binaries) are resolved against: the spec file's directory,
	// unless the caller sets another (a run keeps a copy of its spec).
	BaseDir     string
	Version     int
	Name        string
	Description string
	Params      []*Param // in file order
	Cluster     *Cluster // nil when the spec has none: one device
	Env         map[string]string
	Stages      []*Stage // in file order

	root *yaml.Node
	// tooComplex is set when decoding stopped at the node or depth limit;
	// walking the YAML again (following aliases) could then take
	// exponential time, so Validate and Resolve refuse.
	tooComplex bool
}

// Param is a typed pipeline parameter, overridable with `-p name=value`.
type Param struct {
	Name        string
	Type        Type
	Default     any // nil when the param has no default and must be given
	Description string
	Pos         Pos
}

// Cluster says where a stage runs: a number of local simulated devices or a
// rank table file. Exactly one of Devices and RankTable comes from the spec;
// Load leaves Devices 0 when only RankTable is given.
type Cluster struct {
	Devices   int
	RankTable string // path relative to the spec file's directory
	// DevicesExpr holds `${{ }}` when devices is an expression (for example a param).
	DevicesExpr *Template
	Pos         Pos
	DevicesPos  Pos
	TablePos    Pos
}

// Stage is one step of the pipeline, run by the plugin named in Uses.
type Stage struct {
	ID          string
	Uses        string
	Description string
	With        *yaml.Node // a mapping, or nil; templates are in Templates
	Needs       []string
	If          *Template // nil when the stage always runs
	Cluster     *Cluster  // nil: the pipeline's cluster
	Timeout     time.Duration
	Retry       Retry
	Outputs     []OutputDecl // outputs declared in the spec (for exec and custom plugins)
	Env         map[string]string
	SHA256      string // optional pin of a plugin binary (hex)
	Limits      Limits // resources each process of the stage may use

	Pos       Pos            // the stage's key
	UsesPos   Pos            // the uses value
	NeedsPos  map[string]Pos // each entry of needs
	Templates []*Template    // every template in with, in file order
	keyPos    map[string]Pos // position of each key in the stage mapping

	badTemplates map[*yaml.Node]bool // values whose template did not parse (already reported)
}

// Limits bounds the resources of a stage's processes.
type Limits struct {
	// Memory is the most memory, in bytes, that each process of the stage
	// may allocate: the plugin and every process it starts (ranks inherit
	// it). It is per process, not a total for the stage. 0: no limit.
	Memory    int64
	MemoryPos Pos
}

// MinMemoryLimit is the smallest limits.memory accepted. The limit counts
// a process's data segment, reserved rather than resident: a Go plugin
// linked with cgo holds about 150 MiB of it at rest (8 MiB of stack for
// each of its threads, the C and Go heaps), and below this it would fail
// before doing any work.
const MinMemoryLimit = 256 << 20

// MaxMemoryLimit is the largest limits.memory accepted: 16 TiB, more
// memory than any one machine has, so a larger limit would limit nothing
// (and 1 PiB or more does not fit the size arithmetic).
const MaxMemoryLimit = 16 << 40

// Retry says how often a failed stage is attempted again.
type Retry struct {
	MaxAttempts int           // total attempts, at least 1
	Backoff     time.Duration // wait before the second attempt; doubles after each failure
}

// OutputDecl is an output a stage promises, with its type.
type OutputDecl struct {
	Name        string
	Type        Type
	Description string
	Pos         Pos
}

// Type is the type of a param or output value.
type Type string

// The value types of params and outputs. Path is a string naming a file or
// directory whose content counts for caching.
const (
	TypeString Type = "string"
	TypeInt    Type = "int"
	TypeFloat  Type = "float"
	TypeBool   Type = "bool"
	TypePath   Type = "path"
	TypeList   Type = "list"
	TypeMap    Type = "map"
	TypeAny    Type = "any"
)

// ParamTypes lists the types a param may declare.
var paramTypes = []string{"string", "int", "float", "bool", "path", "list", "map"}

// outputTypes lists the types an output may declare.
var outputTypes = []string{"string", "int", "float", "bool", "path", "list", "map", "any"}

// Resolve returns path made absolute against the spec's BaseDir.
func (p *Pipeline) Resolve(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(p.BaseDir, path)
}

// StageByID returns the stage with the given id, or nil.
func (p *Pipeline) StageByID(id string) *Stage {
	for _, s := range p.Stages {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// Param returns the param with the given name, or nil.
func (p *Pipeline) Param(name string) *Param {
	for _, pr := range p.Params {
		if pr.Name == name {
			return pr
		}
	}
	return nil
}

// EffectiveCluster is the cluster a stage runs on: its own, else the
// pipeline's, else one device.
func (p *Pipeline) EffectiveCluster(s *Stage) *Cluster {
	if s != nil && s.Cluster != nil {
		return s.Cluster
	}
	if p.Cluster != nil {
		return p.Cluster
	}
	return &Cluster{Devices: 1}
}
