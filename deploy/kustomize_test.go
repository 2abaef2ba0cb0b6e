package deploy_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The starter example's overlay over deploy/ and what it sets: only the
// image and the fixture store.
const (
	starterDir   = "../examples/starter/deploy"
	projectImage = "ghcr.io/pyrula/caseworker"
	starterImage = "registry.example.com/shop/starter-worker:1.0.0"
	starterStore = "s3://shop-cases/cases?region=eu-west-1"
	fixtureStore = "PYRULA_FIXTURE_STORE"
)

// renderedOverlays are the kustomizations outside deploy/ that
// TestKustomizations renders besides those in deploy/.
var renderedOverlays = []string{starterDir}

// render builds the kustomization in dir with the kustomize API (what
// `kubectl kustomize` runs) and decodes every rendered object strictly.
func render(t *testing.T, dir string) ([]byte, []object) {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	objs, err := decodeDocs(dir+" (rendered)", out)
	if err != nil {
		t.Fatal(err)
	}
	return out, objs
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// podSpec returns the pod template of a Deployment or Job, nil for others.
func podSpec(o object) *corev1.PodSpec {
	switch v := o.obj.(type) {
	case *appsv1.Deployment:
		return &v.Spec.Template.Spec
	case *batchv1.Job:
		return &v.Spec.Template.Spec
	}
	return nil
}

// TestStarterOverlay: the starter example's overlay changes the project's
// deploy/ only in the image and the fixture store.
func TestStarterOverlay(t *testing.T) {
	// The overlay's own kustomization.yaml: nothing but the base, the image
	// and patches.
	var kz map[string]any
	if err := yaml.UnmarshalStrict(mustRead(t, filepath.Join(starterDir, "kustomization.yaml")), &kz); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", starterDir, err)
	}
	allowed := []string{"apiVersion", "kind", "resources", "images", "patches", "namespace"}
	for key := range kz {
		if !slices.Contains(allowed, key) {
			t.Errorf("%s/kustomization.yaml sets %s: the overlay may only set %v", starterDir, key, allowed)
		}
	}
	if res, _ := kz["resources"].([]any); len(res) != 1 || res[0] != "../../../deploy" {
		t.Errorf("%s/kustomization.yaml: resources %v, want only the project's deploy/ (../../../deploy)", starterDir, kz["resources"])
	}

	baseOut, base := render(t, ".")
	if ns, ok := kz["namespace"]; ok {
		var root kusttypes.Kustomization
		if err := yaml.Unmarshal(mustRead(t, "kustomization.yaml"), &root); err != nil {
			t.Fatal(err)
		}
		if ns != root.Namespace {
			t.Errorf("%s/kustomization.yaml: namespace %v, the base's is %q: keep it", starterDir, ns, root.Namespace)
		}
	}
	out, objs := render(t, starterDir)
	if !strings.Contains(string(baseOut), projectImage+":") {
		t.Fatalf("deploy/ renders no %s image: the checks below would prove nothing", projectImage)
	}
	if strings.Contains(string(out), projectImage) {
		t.Errorf("the rendered overlay still references %s", projectImage)
	}

	d := get[*appsv1.Deployment](t, objs, "Deployment", workerName)
	if img := container(t, d.Spec.Template.Spec, workerCtr).Image; img != starterImage {
		t.Errorf("the worker container's image is %q, want the overlay's %q", img, starterImage)
	}
	job := get[*batchv1.Job](t, objs, "Job", migrateName)
	if img := container(t, job.Spec.Template.Spec, "migrate").Image; img != starterImage {
		t.Errorf("the migrate Job's image is %q, want the overlay's %q", img, starterImage)
	}
	for _, o := range objs {
		if spec := podSpec(o); spec != nil {
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				if c.Image != starterImage {
					t.Errorf("%s %s container %s: image %q, want %q", o.kind, o.name, c.Name, c.Image, starterImage)
				}
			}
		}
	}

	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap", workerName)
	baseCM := get[*corev1.ConfigMap](t, base, "ConfigMap", workerName)
	if got, ok := cm.Data[fixtureStore]; !ok || got != starterStore {
		t.Errorf("ConfigMap %s: %s is %q, want the overlay's %q", workerName, fixtureStore, got, starterStore)
	}
	if _, ok := baseCM.Data[fixtureStore]; !ok {
		t.Errorf("the base's ConfigMap %s has no %s", workerName, fixtureStore)
	}
	rest, baseRest := maps.Clone(cm.Data), maps.Clone(baseCM.Data)
	delete(rest, fixtureStore)
	delete(baseRest, fixtureStore)
	if !maps.Equal(rest, baseRest) {
		for k := range maps.Keys(rest) {
			if v, ok := baseRest[k]; !ok || v != rest[k] {
				t.Errorf("ConfigMap %s: the overlay sets %s=%q, the base %q", workerName, k, rest[k], v)
			}
		}
		for k := range maps.Keys(baseRest) {
			if _, ok := rest[k]; !ok {
				t.Errorf("ConfigMap %s: the overlay drops %s", workerName, k)
			}
		}
	}

	// Every object equals the base's once the image and the store are set
	// in it: same objects, same namespace, nothing else changed.
	type key struct{ kind, name string }
	want := map[key]object{}
	for _, o := range base {
		if spec := podSpec(o); spec != nil {
			for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
				for i := range cs {
					if strings.HasPrefix(cs[i].Image, projectImage+":") || strings.HasPrefix(cs[i].Image, projectImage+"@") {
						cs[i].Image = starterImage
					}
				}
			}
		}
		if cm, ok := o.obj.(*corev1.ConfigMap); ok && cm.Name == workerName {
			cm.Data[fixtureStore] = starterStore
		}
		want[key{o.kind, o.name}] = o
	}
	for _, o := range objs {
		w, ok := want[key{o.kind, o.name}]
		if !ok {
			t.Errorf("the overlay adds %s %s", o.kind, o.name)
			continue
		}
		delete(want, key{o.kind, o.name})
		gotY, err1 := yaml.Marshal(o.obj)
		wantY, err2 := yaml.Marshal(w.obj)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if string(gotY) != string(wantY) {
			t.Errorf("the overlay changes %s %s beyond the image and the store:\n%s\nthe base's, with them set:\n%s", o.kind, o.name, gotY, wantY)
		}
	}
	for k := range want {
		t.Errorf("the overlay drops %s %s", k.kind, k.name)
	}

	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "image:") || strings.Contains(l, fixtureStore+":") {
			t.Logf("rendered: %s", strings.TrimSpace(l))
		}
	}
}
