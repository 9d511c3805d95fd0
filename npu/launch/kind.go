package launch

import (
	"errors"
	"fmt"
	"strings"
)

// Launcher is the program that starts a job's rank processes: mspipe
// itself (Local), Open MPI's mpirun, or Slurm's srun. It is parsed once,
// where the spec is decoded (UnmarshalText), like parallel.Mode.
type Launcher uint8

const (
	// Local starts every rank on this host as a child of mspipe (Run).
	Local Launcher = iota
	// MPIRun starts one mpirun, which starts every rank on the hosts of
	// a hostfile (RunExternal).
	MPIRun
	// Srun starts one srun inside a Slurm allocation (RunExternal).
	Srun
	launcherCount
)

// ErrUnknownLauncher is wrapped by the error for a launcher name that is
// not one of Launchers.
var ErrUnknownLauncher = errors.New("unknown launcher")

var launcherNames = [launcherCount]string{"local", "mpirun", "srun"}

// Launchers returns every launcher in declaration order.
func Launchers() []Launcher {
	out := make([]Launcher, launcherCount)
	for i := range out {
		out[i] = Launcher(i)
	}
	return out
}

// ParseLauncher returns the launcher named s: "local", "mpirun" or "srun".
func ParseLauncher(s string) (Launcher, error) {
	for i, name := range launcherNames {
		if s == name {
			return Launcher(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (valid: %s)", ErrUnknownLauncher, s, strings.Join(launcherNames[:], ", "))
}

// String returns the launcher's name, which is also its program's.
func (l Launcher) String() string {
	if l < launcherCount {
		return launcherNames[l]
	}
	return fmt.Sprintf("Launcher(%d)", uint8(l))
}

// MarshalText returns the launcher's name.
func (l Launcher) MarshalText() ([]byte, error) {
	if l >= launcherCount {
		return nil, fmt.Errorf("%w %d", ErrUnknownLauncher, uint8(l))
	}
	return []byte(launcherNames[l]), nil
}

// UnmarshalText parses a launcher name (see ParseLauncher).
func (l *Launcher) UnmarshalText(text []byte) error {
	parsed, err := ParseLauncher(string(text))
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// JSONSchema describes a launcher in a stage's `with` schema: one of the
// names, local (the zero Launcher) by default.
func (Launcher) JSONSchema() map[string]any {
	names := make([]any, len(launcherNames))
	for i, n := range launcherNames {
		names[i] = n
	}
	return map[string]any{"type": "string", "enum": names, "default": Local.String()}
}
