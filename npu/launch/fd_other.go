//go:build !unix

package launch

import (
	"errors"
	"os"
)

var errNoFDs = errors.New("external launchers need a Unix system")

func keepStdout() (*os.File, error) { return nil, errNoFDs }

func redirectOutput(*os.File) error { return errNoFDs }
