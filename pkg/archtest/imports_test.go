package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/qmq-go/qmq"

type pkgInfo struct {
	ImportPath string
	Deps       []string
}

func listDeps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		deps[strings.TrimPrefix(p.ImportPath, module+"/")] = p.Deps
	}
	return deps
}

func ours(dep string) (string, bool) {
	if dep == module {
		return "", true
	}
	if rest, ok := strings.CutPrefix(dep, module+"/"); ok {
		return rest, true
	}
	return "", false
}

func under(pkg, part string) bool { return pkg == part || strings.HasPrefix(pkg, part+"/") }

// servers are the parts that run as servers; none may import another.
var servers = []string{"metaserver", "realtime", "delay"}

func TestImportRules(t *testing.T) {
	for pkg, deps := range listDeps(t) {
		for _, d := range deps {
			dep, mine := ours(d)
			switch {
			case under(pkg, "realtime/store") || under(pkg, "delay/store"):
				if mine && (under(dep, "pkg/netserver") || under(dep, "pkg/transport") || under(dep, "pkg/metaclient")) ||
					strings.HasPrefix(d, "github.com/panjf2000/gnet") || strings.HasPrefix(d, "go.etcd.io/") {
					t.Errorf("storage package %s imports networking %s", pkg, d)
				}
			case under(pkg, "pkg/protocol"):
				if mine {
					t.Errorf("pkg/protocol imports %s", d)
				}
			}
			if !mine {
				continue
			}
			if under(pkg, "producer") || under(pkg, "consumer") {
				for _, s := range servers {
					if under(dep, s) {
						t.Errorf("client library %s imports server package %s", pkg, dep)
					}
				}
			}
			if under(pkg, "pkg") && !under(dep, "pkg") {
				t.Errorf("%s imports %s, a part above pkg/", pkg, dep)
			}
			for _, a := range servers {
				for _, b := range servers {
					if a != b && under(pkg, a) && under(dep, b) {
						t.Errorf("server package %s imports server package %s", pkg, dep)
					}
				}
			}
		}
	}
}
