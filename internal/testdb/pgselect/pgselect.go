// Package pgselect decides where the tests' throwaway PostgreSQL comes
// from (package testdb). The command line follows the same order without
// step 3: it links no Docker client.
//
//  1. a database URL the caller configured (RUNLEDGER_TEST_DATABASE_URL);
//  2. the binaries in RUNLEDGER_PG_BINDIR, when it is set: naming binaries is
//     as explicit as naming a URL, so it wins over anything discovered (the
//     version matrix relies on this to test the major it fetched even where
//     a Docker daemon answers);
//  3. Docker, when a daemon answers a ping;
//  4. the machine's own server binaries (package pgserver finds them).
//
// Each probe runs only if the ones before it did not settle the choice, so a
// configured URL costs no Docker ping. The package starts nothing: callers
// start the server of the kind chosen, each with its own settings.
package pgselect

import (
	"errors"
	"fmt"
)

// Source is where the server comes from.
type Source string

// The sources, in the order Choose prefers them (SourceLocal covers both the
// RUNLEDGER_PG_BINDIR binaries and the machine's own).
const (
	SourceURL    Source = "url"
	SourceDocker Source = "docker"
	SourceLocal  Source = "local"
)

// ErrNoServer is matched (errors.Is) by the *NoServerError Choose returns
// when nothing is available.
var ErrNoServer = errors.New("no PostgreSQL server available")

// NoServerError says why each probe failed, for a message that names what
// to install.
type NoServerError struct {
	// Docker is the ping's error.
	Docker error
	// Local is the error of the search for server binaries.
	Local error
}

// Error lists both reasons.
func (e *NoServerError) Error() string {
	return fmt.Sprintf("%v (docker: %v; server binaries: %v)", ErrNoServer, e.Docker, e.Local)
}

// Is makes errors.Is(err, ErrNoServer) true.
func (e *NoServerError) Is(target error) bool { return target == ErrNoServer }

// Probes are what Choose asks, each only when needed.
type Probes struct {
	// URL reports whether the caller configured a database URL.
	URL bool
	// BinDir is the value of RUNLEDGER_PG_BINDIR (pgserver.EnvBinDir); when
	// it is not empty the choice is SourceLocal without probing, and a
	// directory without the programs fails when the server starts rather
	// than falling back.
	BinDir string
	// Docker pings a Docker daemon; nil means one answered.
	Docker func() error
	// Local looks for the machine's server binaries; nil means found.
	Local func() error
}

// Choose returns the first available source in the package's order. With
// none available the error is a *NoServerError holding each probe's reason.
func Choose(p Probes) (Source, error) {
	if p.URL {
		return SourceURL, nil
	}
	if p.BinDir != "" {
		return SourceLocal, nil
	}
	dockerErr := p.Docker()
	if dockerErr == nil {
		return SourceDocker, nil
	}
	localErr := p.Local()
	if localErr == nil {
		return SourceLocal, nil
	}
	return "", &NoServerError{Docker: dockerErr, Local: localErr}
}
