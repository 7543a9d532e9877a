// Package buildinfo tells which build a binary is: the version and commit
// stamped at link time by scripts/build.sh, else what the Go toolchain
// recorded (the module version of `go install pkg@version`, the VCS
// revision of a build inside a git checkout), and the Go version.
//
// Stamping (scripts/build.sh does this):
//
//	go build -ldflags "-X github.com/qmq-go/qmq/pkg/buildinfo.Version=v1.2.0 \
//	    -X github.com/qmq-go/qmq/pkg/buildinfo.Commit=0123abcd" ./realtime/cmd/qmq-realtime
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; empty when the build was not stamped.
var (
	// Version is the release, e.g. v1.2.0 or v1.2.0-3-g0123abc-dirty.
	Version = ""
	// Commit is the git commit the binary was built from.
	Commit = ""
)

// Info is what a binary reports for --version.
type Info struct {
	Version   string // stamped, else the module version, else "(devel)"
	Commit    string // stamped, else vcs.revision, else "unknown"
	GoVersion string // the toolchain that built the binary
	Platform  string // GOOS/GOARCH
}

// Read returns the binary's build information.
func Read() Info {
	in := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if in.Commit == "" && s.Key == "vcs.revision" {
				in.Commit = s.Value
			}
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}

// String is the one line of --version after the binary's name:
// "v1.2.0 (commit 0123abcd, go1.26.8, linux/amd64)".
func (in Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", in.Version, in.Commit, in.GoVersion, in.Platform)
}
