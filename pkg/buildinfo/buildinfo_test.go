package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestRead_StampedValuesWin(t *testing.T) {
	Version, Commit = "v9.8.7", "feedbeef"
	defer func() { Version, Commit = "", "" }()
	in := Read()
	if in.Version != "v9.8.7" || in.Commit != "feedbeef" || in.GoVersion != runtime.Version() {
		t.Fatalf("Read() = %+v", in)
	}
	s := in.String()
	for _, want := range []string{"v9.8.7", "commit feedbeef", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(s, want) {
			t.Fatalf("String() = %q, missing %q", s, want)
		}
	}
}

func TestRead_UnstampedNamesWhatItKnows(t *testing.T) {
	in := Read()
	if in.Version == "" || in.Commit == "" || !strings.HasPrefix(in.GoVersion, "go") {
		t.Fatalf("Read() = %+v", in)
	}
}
