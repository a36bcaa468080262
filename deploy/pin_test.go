package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestPinImage runs hack/pin-image.sh on a copy of deploy/, twice (a new
// release pins over the last one), and builds the base and every overlay:
// each DaemonSet must run REPOSITORY@DIGEST, and the checkout is untouched.
func TestPinImage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deploy")
	if out, err := exec.Command("cp", "-r", ".", dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	const repo = "registry.example.com/team/svcproxy"
	for _, digest := range []string{"sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("b", 64)} {
		out, err := exec.Command("../hack/pin-image.sh", repo, digest, dir).CombinedOutput()
		if err != nil {
			t.Fatalf("pin-image.sh: %v\n%s", err, out)
		}
	}
	want := repo + "@sha256:" + strings.Repeat("b", 64)
	dirs, err := os.ReadDir(filepath.Join(dir, "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	kustomizations := []string{"base"}
	for _, d := range dirs {
		kustomizations = append(kustomizations, "overlays/"+d.Name())
	}
	for _, k := range kustomizations {
		r := mustBuild(t, filesys.MakeFsOnDisk(), filepath.Join(dir, k))
		images := 0
		for name, ds := range r.daemonSets {
			// The canary's kube-proxy is a patch of the cluster's, without containers.
			for _, c := range ds.Spec.Template.Spec.Containers {
				if images++; c.Image != want {
					t.Errorf("%s: DaemonSet %s runs %q, want %q", k, name, c.Image, want)
				}
			}
		}
		if images == 0 {
			t.Errorf("%s renders no container", k)
		}
	}
	if out, err := exec.Command("../hack/pin-image.sh", repo+":v1", want[len(repo)+1:], dir).CombinedOutput(); err == nil {
		t.Errorf("a repository with a tag was accepted:\n%s", out)
	}
	if b, err := os.ReadFile("base/kustomization.yaml"); err != nil || !strings.Contains(string(b), "newTag: dev") {
		t.Errorf("the checkout's deploy/base changed: %v", err)
	}
}
