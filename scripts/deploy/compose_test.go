package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
)

// Every QMQ-Go server of the compose file starts from a command line and
// environment its binary accepts: each is run with --check-config here,
// with no container engine needed.
func TestCompose_ServerCommandsValidate(t *testing.T) {
	text, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := yaml.Parser().Unmarshal(text)
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	services, _ := doc["services"].(map[string]any)
	if len(services) != 15 {
		t.Fatalf("compose.yaml has %d services, want 15 (3 hosts)", len(services))
	}
	dir := binaries(t)
	names := make([]string, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	sort.Strings(names)
	checked := 0
	for _, name := range names {
		svc, _ := services[name].(map[string]any)
		command, _ := svc["command"].([]any)
		if len(command) == 0 {
			t.Errorf("service %s has no command", name)
			continue
		}
		bin := fmt.Sprint(command[0])
		if bin == "etcd" {
			continue
		}
		if _, ok := servers[bin]; !ok {
			t.Errorf("service %s runs %q, not a server binary", name, bin)
			continue
		}
		var args, env []string
		for _, a := range command[1:] {
			args = append(args, fmt.Sprint(a))
		}
		environment, _ := svc["environment"].(map[string]any)
		if len(environment) == 0 {
			t.Errorf("service %s has no environment (the x-qmq anchor)", name)
		}
		for k, v := range environment {
			env = append(env, k+"="+fmt.Sprint(v))
		}
		code, _, errOut := run(t, filepath.Join(dir, bin), env, append(args, "--check-config")...)
		if code != 0 {
			t.Errorf("service %s: %s %s --check-config: exit %d: %s", name, bin, strings.Join(args, " "), code, errOut)
		}
		checked++
	}
	if checked != 12 {
		t.Fatalf("checked %d server services, want 12", checked)
	}
}
