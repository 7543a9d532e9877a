package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The FROM-scratch image builds with image.sh and holds the stamped static
// binaries and etcd, run as user 65532. It uses podman or docker where one
// runs, else buildah (no daemon: its storage goes in a temporary
// directory).
func TestImage_BuildsFromScratch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary and an image (minutes on a busy machine)")
	}
	engine, flags := "", []string(nil)
	for _, e := range []string{"podman", "docker"} {
		if p, err := exec.LookPath(e); err == nil && exec.Command(p, "info").Run() == nil {
			engine = p
			break
		}
	}
	if engine == "" {
		p, err := exec.LookPath("buildah")
		if err != nil {
			t.Skip("no container engine here: podman and docker do not run, buildah is not installed (Debian: apt-get install buildah)")
		}
		root := t.TempDir()
		engine, flags = p, []string{"--root", filepath.Join(root, "root"), "--runroot", filepath.Join(root, "run"), "--storage-driver", "vfs"}
	}
	image := "qmq-go:deploytest"
	build := exec.Command("./image.sh")
	build.Env = append(os.Environ(), "ENGINE="+engine, "ENGINE_FLAGS="+strings.Join(flags, " "), "IMAGE=qmq-go",
		"VERSION=deploytest", "COMMIT="+testCommit, "PATH="+filepath.Dir(goTool())+":"+os.Getenv("PATH"))
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("image.sh: %v\n%s", err, out)
	}
	if lines := strings.Fields(string(out)); len(lines) == 0 || lines[len(lines)-1] != image {
		t.Fatalf("image.sh did not end with the image name:\n%s", out)
	}
	engineCmd := func(args ...string) (string, error) {
		out, err := exec.Command(engine, append(append([]string{}, flags...), args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if filepath.Base(engine) != "buildah" {
		t.Cleanup(func() { engineCmd("rmi", "-f", image, "qmq-go:latest") })
		user, err := engineCmd("image", "inspect", "--format", "{{.Config.User}}", image)
		if err != nil || user != "65532:65532" {
			t.Fatalf("image user %q %v, want 65532:65532", user, err)
		}
		if v, err := engineCmd("run", "--rm", image, "qmq-realtime", "--version"); err != nil {
			// A nested sandbox may refuse what the runtime does to start
			// any container (setrlimit, mounts): not the image's fault.
			t.Skipf("%s built the image but cannot run a container here (%v: %s); its user was checked", engine, err, v)
		}
		for _, bin := range []string{"qmq-metaserver", "qmq-realtime", "qmq-delay", "qmq-gateway"} {
			v, err := engineCmd("run", "--rm", image, bin, "--version")
			if err != nil || !strings.Contains(v, "deploytest (commit "+testCommit) {
				t.Errorf("%s --version in the image: %q %v", bin, v, err)
			}
		}
		return
	}
	user, err := engineCmd("inspect", "--type", "image", "--format", "{{.OCIv1.Config.User}}", image)
	if err != nil || user != "65532:65532" {
		t.Fatalf("image user %q %v, want 65532:65532", user, err)
	}
	layers, err := engineCmd("inspect", "--type", "image", "--format", "{{len .OCIv1.RootFS.DiffIDs}}", image)
	if err != nil || (layers != "1" && layers != "2") {
		t.Fatalf("image layers %q %v, want at most 2 (rootfs and bin: nothing from a base image)", layers, err)
	}
	container, err := engineCmd("from", image)
	if err != nil {
		t.Fatalf("buildah from: %s %v", container, err)
	}
	t.Cleanup(func() { engineCmd("rm", container) })
	root, err := engineCmd("mount", container)
	if err != nil {
		t.Fatalf("buildah mount: %s %v", root, err)
	}
	for _, bin := range []string{"qmq-metaserver", "qmq-realtime", "qmq-delay", "qmq-gateway"} {
		code, v, _ := run(t, filepath.Join(root, "usr/local/bin", bin), nil, "--version")
		if code != 0 || !strings.Contains(v, "deploytest (commit "+testCommit) {
			t.Errorf("%s --version in the image: exit %d %q", bin, code, v)
		}
	}
	for _, f := range []string{"usr/local/bin/qmqctl", "usr/local/bin/etcd", "var/lib/qmq", "etc/qmq"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the image lacks /%s: %v", f, err)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "var/lib/qmq")); err == nil && st.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/qmq is %v, want 0700", st.Mode().Perm())
	}
}
