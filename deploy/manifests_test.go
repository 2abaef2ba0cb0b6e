package deploy_test

import (
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/pyrula/caseworker/llm/anthropicllm"
	"github.com/pyrula/caseworker/llm/openaillm"
	"github.com/pyrula/caseworker/worker"
)

// Names of the objects the checks look up.
const (
	workerName   = "pyrula-worker" // Deployment, ConfigMap, Secret, Service, ...
	workerCtr    = "worker"        // the Deployment's container
	migrateName  = "pyrula-worker-migrate"
	httpPortName = "http"
)

// manifestTypes maps apiVersion/kind to the type a document is decoded into.
var manifestTypes = map[string]func() any{
	"v1/ServiceAccount":                             func() any { return new(corev1.ServiceAccount) },
	"v1/ConfigMap":                                  func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                                     func() any { return new(corev1.Secret) },
	"v1/Service":                                    func() any { return new(corev1.Service) },
	"apps/v1/Deployment":                            func() any { return new(appsv1.Deployment) },
	"batch/v1/Job":                                  func() any { return new(batchv1.Job) },
	"policy/v1/PodDisruptionBudget":                 func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler":        func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"monitoring.coreos.com/v1/ServiceMonitor":       func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule":       func() any { return new(monitoringv1.PrometheusRule) },
	"keda.sh/v1alpha1/ScaledObject":                 func() any { return new(scaledObject) },
	"keda.sh/v1alpha1/TriggerAuthentication":        func() any { return new(triggerAuthentication) },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return new(kusttypes.Kustomization) },
	"kustomize.config.k8s.io/v1alpha1/Component":    func() any { return new(kusttypes.Kustomization) },
}

// object is one decoded YAML document.
type object struct {
	file string // relative to deploy/
	kind string // apiVersion/kind
	name string
	obj  any
}

// manifests are all the YAML documents under deploy/.
type manifests []object

var (
	docSep      = regexp.MustCompile(`(?m)^---[ \t]*$`)
	commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)
)

// decodeDocs decodes every document of a multi-document YAML stream
// strictly: unknown or duplicate fields fail.
func decodeDocs(file string, b []byte) ([]object, error) {
	var out []object
	for i, doc := range docSep.Split(string(b), -1) {
		if strings.TrimSpace(commentLine.ReplaceAllString(doc, "")) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		kind := tm.APIVersion + "/" + tm.Kind
		newObj, ok := manifestTypes[kind]
		if !ok {
			return nil, fmt.Errorf("%s: document %d: no type known for %q (add it to manifestTypes)", file, i+1, kind)
		}
		v := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", file, i+1, kind, err)
		}
		o := object{file: file, kind: tm.Kind, obj: v}
		if n, ok := v.(interface{ GetName() string }); ok {
			o.name = n.GetName()
		}
		out = append(out, o)
	}
	return out, nil
}

// loadManifests decodes every .yaml file under deploy/.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	var all manifests
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		objs, err := decodeDocs(path, b)
		all = append(all, objs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// get returns the one object of kind named name under deploy/, failing
// the test when there is not exactly one.
func get[T any](t *testing.T, m manifests, kind, name string) T {
	t.Helper()
	var found []T
	for _, o := range m {
		if o.kind == kind && o.name == name {
			found = append(found, o.obj.(T))
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one %s %q in deploy/, found %d", kind, name, len(found))
	}
	return found[0]
}

// all returns every object of kind.
func all[T any](m manifests, kind string) []T {
	var out []T
	for _, o := range m {
		if o.kind == kind {
			out = append(out, o.obj.(T))
		}
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := loadManifests(t)
	kinds := map[string]int{}
	for _, o := range m {
		kinds[o.kind]++
		if o.kind != "Kustomization" && o.kind != "Component" && o.name == "" {
			t.Errorf("%s: a %s without metadata.name", o.file, o.kind)
		}
	}
	for _, k := range []string{"Deployment", "ConfigMap", "Secret", "Service", "ServiceAccount", "Job", "PodDisruptionBudget",
		"ScaledObject", "TriggerAuthentication", "HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "Kustomization"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in deploy/", k)
		}
	}
	t.Logf("decoded %d objects strictly: %v", len(m), kinds)
}

// TestStrictDecodingRejectsUnknownFields keeps the other tests honest: a
// misspelt field must fail, in the Kubernetes types and the KEDA mirror.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n",
		"apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  triggers: []\n  minReplicas: 2\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec:\n  groups: [{name: g, rules: [{alert: A, expr: up, for: 5m, summary: s}]}]\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {A: \"1\", A: \"2\"}\n",
	} {
		_, err := decodeDocs("inline", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), "unknown field") && !strings.Contains(err.Error(), "already set") {
			t.Errorf("want an unknown or duplicate field error, got %v for\n%s", err, doc)
		}
	}
}

// TestKustomizations checks that every kustomization's resources and
// generator files exist and that every manifest is used by one (but the
// example Secret, which must not be applied), and renders each, and the
// overlays in renderedOverlays, with the kustomize API: every rendered
// object must decode strictly and have a namespace.
func TestKustomizations(t *testing.T) {
	m := loadManifests(t)
	used := map[string]bool{}
	var dirs []string
	for _, o := range m {
		if o.kind != "Kustomization" && o.kind != "Component" {
			continue
		}
		k := o.obj.(*kusttypes.Kustomization)
		dir := filepath.Dir(o.file)
		if o.kind == "Kustomization" {
			dirs = append(dirs, dir)
		}
		for _, c := range k.Components {
			if _, err := os.Stat(filepath.Join(dir, c, "kustomization.yaml")); err != nil {
				t.Errorf("%s: component %s is not a directory with a kustomization.yaml", o.file, c)
			}
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			st, err := os.Stat(p)
			if err != nil {
				t.Errorf("%s: resource %s: %v", o.file, r, err)
				continue
			}
			if st.IsDir() {
				if _, err := os.Stat(filepath.Join(p, "kustomization.yaml")); err != nil {
					t.Errorf("%s: resource %s is a directory without a kustomization.yaml", o.file, r)
				}
				continue
			}
			used[p] = true
		}
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.FileSources {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("%s: configMapGenerator %s: %v", o.file, g.Name, err)
				}
			}
		}
	}
	for _, o := range m {
		if o.kind == "Kustomization" || o.kind == "Component" || used[o.file] || filepath.Base(o.file) == "secret.example.yaml" {
			continue
		}
		t.Errorf("%s (%s %s) is in no kustomization.yaml", o.file, o.kind, o.name)
	}
	if filepath.Base(findFile(m, "Secret", workerName)) != "secret.example.yaml" {
		t.Errorf("the Secret must be only an example (secret.example.yaml), never applied")
	}

	// Render every kustomization here and the starter overlay over deploy/
	// in-process, as `kubectl apply -k` would.
	for _, dir := range append(dirs, renderedOverlays...) {
		t.Run("kustomize build "+dir, func(t *testing.T) {
			_, objs := render(t, dir)
			if len(objs) == 0 {
				t.Fatalf("%s renders no objects", dir)
			}
			for _, o := range objs {
				if ns := o.obj.(metav1.Object).GetNamespace(); ns == "" {
					t.Errorf("rendered %s %s has no namespace", o.kind, o.name)
				}
			}
			t.Logf("%d objects", len(objs))
		})
	}
}

func findFile(m manifests, kind, name string) string {
	for _, o := range m {
		if o.kind == kind && o.name == name {
			return o.file
		}
	}
	return ""
}

// configVars returns worker.Config's variables (PYRULA_<envconfig tag>) by
// reflection, so that a field added to the struct is checked at once.
func configVars(t *testing.T) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	typ := reflect.TypeFor[worker.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("envconfig")
		if !f.IsExported() || tag == "" || tag == "-" {
			t.Fatalf("worker.Config.%s has no envconfig tag", f.Name)
		}
		vars[worker.EnvPrefix+"_"+tag] = true
	}
	if len(vars) < 10 {
		t.Fatalf("found only %d variables in worker.Config", len(vars))
	}
	return vars
}

// container returns the named container of spec.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// podEnv is the environment the container would see in a pod: envFrom
// ConfigMaps, then env, with Secret values from the example Secret and
// the pod name for metadata.name. It fails the test on a reference to a
// missing ConfigMap, Secret key or field, and on a variable set twice.
func podEnv(t *testing.T, m manifests, c corev1.Container) (env map[string]string, setBy map[string]string) {
	t.Helper()
	env, setBy = map[string]string{}, map[string]string{}
	secret := get[*corev1.Secret](t, m, "Secret", workerName)
	set := func(name, value, by string) {
		if prev, ok := setBy[name]; ok {
			t.Errorf("%s is set twice: by %s and by %s", name, prev, by)
		}
		env[name], setBy[name] = value, by
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil || ef.Prefix != "" {
			t.Errorf("container %s: envFrom must be a ConfigMap without prefix, got %+v", c.Name, ef)
			continue
		}
		cm := get[*corev1.ConfigMap](t, m, "ConfigMap", ef.ConfigMapRef.Name)
		for k, v := range cm.Data {
			set(k, v, "ConfigMap "+cm.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, e.Value, "env")
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != secret.Name {
				t.Errorf("%s: from Secret %q, want %q (secret.example.yaml)", e.Name, ref.Name, secret.Name)
				continue
			}
			v, ok := secret.StringData[ref.Key]
			if !ok {
				t.Errorf("%s: Secret key %q is not in secret.example.yaml", e.Name, ref.Key)
				continue
			}
			set(e.Name, v, "Secret "+ref.Name+" key "+ref.Key)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			set(e.Name, "pyrula-worker-6d8f7c9b5-x2k4q", "the pod name")
		default:
			t.Errorf("%s: unsupported valueFrom %+v", e.Name, e.ValueFrom)
		}
	}
	return env, setBy
}

// loadConfig loads the worker's configuration with exactly env as its
// environment.
func loadConfig(t *testing.T, env map[string]string) (worker.Config, error) {
	t.Helper()
	return worker.LoadConfigFrom(func(k string) string { return env[k] })
}

// deployedConfig is the worker's configuration in the Deployment's pod.
func deployedConfig(t *testing.T, m manifests) (worker.Config, map[string]string) {
	t.Helper()
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	env, _ := podEnv(t, m, container(t, d.Spec.Template.Spec, workerCtr))
	cfg, err := loadConfig(t, env)
	if err != nil {
		t.Fatalf("the Deployment's environment does not load: %v", err)
	}
	return cfg, env
}

func TestDeploymentEnvMatchesConfig(t *testing.T) {
	m := loadManifests(t)
	vars := configVars(t)
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	env, setBy := podEnv(t, m, container(t, d.Spec.Template.Spec, workerCtr))
	// The built-in model clients' keys are read by the clients, not by
	// worker.Config; they come from the Secret, each optional.
	providerKeys := map[string]string{anthropicllm.EnvAPIKey: "anthropic-api-key", openaillm.EnvAPIKey: "openai-api-key"}
	for name := range env {
		if !vars[name] && providerKeys[name] == "" {
			t.Errorf("the Deployment sets %s (%s), which is not a field of worker.Config", name, setBy[name])
		}
	}
	for name, key := range providerKeys {
		if want := "Secret " + workerName + " key " + key; setBy[name] != want {
			t.Errorf("%s is set by %q, want %q", name, setBy[name], want)
		}
	}
	for _, e := range container(t, d.Spec.Template.Spec, workerCtr).Env {
		if _, ok := providerKeys[e.Name]; ok && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional) {
			t.Errorf("%s must be an optional Secret key: a worker without that provider needs none", e.Name)
		}
	}
	// The streams derive from PYRULA_NAMESPACE: setting them would write
	// the namespace twice.
	derived := []string{"PYRULA_CASE_STREAM", "PYRULA_REPLY_STREAM"}
	for name := range vars {
		_, ok := setBy[name]
		switch {
		case slices.Contains(derived, name) && ok:
			t.Errorf("the Deployment sets %s (%s): leave it to derive from PYRULA_NAMESPACE", name, setBy[name])
		case !slices.Contains(derived, name) && !ok:
			t.Errorf("worker.Config has %s, which the Deployment does not set (add it to base/configmap.yaml with its default)", name)
		}
	}
	if by := setBy["PYRULA_CONSUMER_NAME"]; by != "the pod name" {
		t.Errorf("PYRULA_CONSUMER_NAME must be the pod name (fieldRef metadata.name), is set by %q", by)
	}
	for _, name := range []string{"PYRULA_POSTGRES_DSN", "PYRULA_VALKEY_USERNAME", "PYRULA_VALKEY_PASSWORD"} {
		if !strings.HasPrefix(setBy[name], "Secret ") {
			t.Errorf("%s can hold a password: it must come from the Secret, is set by %q", name, setBy[name])
		}
	}
	// Valkey's address is plain configuration, shared with KEDA's triggers;
	// its credentials are not in it.
	if vu, err := url.Parse(env["PYRULA_VALKEY_URL"]); err != nil || vu.User != nil || !strings.HasPrefix(setBy["PYRULA_VALKEY_URL"], "ConfigMap ") {
		t.Errorf("PYRULA_VALKEY_URL must come from the ConfigMap without credentials (set by %q)", setBy["PYRULA_VALKEY_URL"])
	}
	// Whatever the ConfigMap holds must be a valid configuration, and the
	// worker's defaults: the same Config as with none of it set.
	cfg, err := loadConfig(t, env)
	if err != nil {
		t.Fatalf("the Deployment's environment does not load: %v", err)
	}
	bare := map[string]string{}
	for name, by := range setBy {
		// PYRULA_VALKEY_URL names the cluster's Valkey, not a default.
		if !strings.HasPrefix(by, "ConfigMap ") || name == "PYRULA_VALKEY_URL" {
			bare[name] = env[name]
		}
	}
	defaults, err := loadConfig(t, bare)
	if err != nil {
		t.Fatal(err)
	}
	cv, dv := reflect.ValueOf(cfg), reflect.ValueOf(defaults)
	for i := range cv.NumField() {
		if !reflect.DeepEqual(cv.Field(i).Interface(), dv.Field(i).Interface()) {
			t.Errorf("base/configmap.yaml: %s is %v, the worker's default is %v", cv.Type().Field(i).Name, cv.Field(i), dv.Field(i))
		}
	}

	job := get[*batchv1.Job](t, m, "Job", migrateName)
	jc := container(t, job.Spec.Template.Spec, "migrate")
	jenv, jsetBy := podEnv(t, m, jc)
	for name := range jenv {
		if !vars[name] {
			t.Errorf("the migrate Job sets %s (%s), which is not a field of worker.Config", name, jsetBy[name])
		}
	}
	if !strings.HasPrefix(jsetBy["PYRULA_POSTGRES_DSN"], "Secret ") {
		t.Errorf("the migrate Job must take PYRULA_POSTGRES_DSN from the Secret")
	}
	if !slices.Equal(append(jc.Command, jc.Args...), []string{"db", "migrate"}) {
		t.Errorf("the migrate Job runs %q, want worker db migrate", append(jc.Command, jc.Args...))
	}
}

// containerPort resolves a probe's or Service's port against c.
func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	t.Fatalf("port %s is not a port of container %s", p.String(), c.Name)
	return 0
}

// probePaths are the HTTP paths the kubelet and Prometheus use, with the
// port they go to; the live test GETs each on a running worker.
func probePaths(t *testing.T, m manifests) map[string]string {
	t.Helper()
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	c := container(t, d.Spec.Template.Spec, workerCtr)
	paths := map[string]string{}
	for what, p := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.HTTPGet == nil {
			t.Fatalf("%s is not an httpGet probe", what)
		}
		paths[what] = p.HTTPGet.Path
	}
	sm := get[*monitoringv1.ServiceMonitor](t, m, "ServiceMonitor", workerName)
	for _, ep := range sm.Spec.Endpoints {
		paths["ServiceMonitor"] = cmpOr(ep.Path, "/metrics")
	}
	return paths
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestProbesPortsAndSelectors(t *testing.T) {
	m := loadManifests(t)
	cfg, _ := deployedConfig(t, m)
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	pod := d.Spec.Template
	c := container(t, pod.Spec, workerCtr)

	_, portStr, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		t.Fatalf("PYRULA_HTTP_ADDR %q: %v", cfg.HTTPAddr, err)
	}
	httpPort := containerPort(t, c, intstr.FromString(httpPortName))
	if strconv.Itoa(int(httpPort)) != portStr {
		t.Errorf("container port %s is %d, PYRULA_HTTP_ADDR listens on %s", httpPortName, httpPort, portStr)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Fatal("the worker needs a liveness and a readiness probe")
	}
	for what, p := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		if got := containerPort(t, c, p.HTTPGet.Port); got != httpPort {
			t.Errorf("%s goes to port %d, the worker listens on %d", what, got, httpPort)
		}
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("liveness must be /healthz and readiness /readyz, got %s and %s", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
	}

	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= cfg.ShutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v must be above PYRULA_SHUTDOWN_GRACE %v", grace, cfg.ShutdownGrace)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("the Deployment sets replicas: kubectl apply would fight the autoscaler")
	}

	podLabels := pod.Labels
	selects := func(sel map[string]string, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !selects(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the Deployment's selector does not select its pods")
	}
	svc := get[*corev1.Service](t, m, "Service", workerName)
	if !selects(svc.Spec.Selector, podLabels) {
		t.Errorf("the Service's selector %v does not select the worker pods %v", svc.Spec.Selector, podLabels)
	}
	svcPorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = containerPort(t, c, p.TargetPort)
	}
	pdb := get[*policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", workerName)
	if !selects(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the PodDisruptionBudget does not select the worker pods")
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Errorf("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
	sm := get[*monitoringv1.ServiceMonitor](t, m, "ServiceMonitor", workerName)
	if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("the ServiceMonitor's selector does not select the Service")
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatal("the ServiceMonitor has no endpoints")
	}
	for _, ep := range sm.Spec.Endpoints {
		if svcPorts[ep.Port] != httpPort {
			t.Errorf("the ServiceMonitor scrapes port %q, not the Service port that goes to %d", ep.Port, httpPort)
		}
		if cmpOr(ep.Path, "/metrics") != "/metrics" {
			t.Errorf("the ServiceMonitor scrapes %s, the worker serves /metrics", ep.Path)
		}
	}
}

func TestSecurityAndResources(t *testing.T) {
	m := loadManifests(t)
	uid := dockerfileUser(t)
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	job := get[*batchv1.Job](t, m, "Job", migrateName)
	for what, spec := range map[string]corev1.PodSpec{"Deployment": d.Spec.Template.Spec, "migrate Job": job.Spec.Template.Spec} {
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s: the pod must set runAsNonRoot", what)
		} else if psc.RunAsUser == nil || *psc.RunAsUser != uid {
			t.Errorf("%s: runAsUser %v, the image's USER is %d", what, psc.RunAsUser, uid)
		}
		if spec.ServiceAccountName != workerName {
			t.Errorf("%s: service account %q, want %q (workload identity for S3)", what, spec.ServiceAccountName, workerName)
		}
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s/%s: no securityContext", what, c.Name)
				continue
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s/%s: allowPrivilegeEscalation must be false", what, c.Name)
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s/%s: readOnlyRootFilesystem must be true", what, c.Name)
			case sc.Privileged != nil && *sc.Privileged:
				t.Errorf("%s/%s: privileged", what, c.Name)
			case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
				t.Errorf("%s/%s: capabilities must drop ALL and add none", what, c.Name)
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
				if req.IsZero() || lim.IsZero() {
					t.Errorf("%s/%s: %s needs a request and a limit", what, c.Name, r)
				} else if req.Cmp(lim) > 0 {
					t.Errorf("%s/%s: %s request above its limit", what, c.Name, r)
				}
			}
			if !strings.HasPrefix(c.Image, "ghcr.io/pyrula/caseworker:") {
				t.Errorf("%s/%s: image %s is not the project's image", what, c.Name, c.Image)
			}
		}
	}
}

// kedaOverlays are the kustomizations whose rendered KEDA triggers
// TestKEDATriggersMatchConfig checks against their rendered ConfigMap, with
// the namespace each must end up with: deploy/ itself, and an overlay that
// moves every shared value (namespace, group, a rediss:// URL on another
// host, port and database, the TLS component).
var kedaOverlays = map[string]string{".": "pyrula", "testdata/moved": "shop"}

// renderedManifests renders dir and adds the example Secret, which no
// kustomization applies, for podEnv.
func renderedManifests(t *testing.T, dir string) manifests {
	t.Helper()
	_, objs := render(t, dir)
	secret := get[*corev1.Secret](t, loadManifests(t), "Secret", workerName)
	return append(manifests(objs), object{file: "base/secret.example.yaml", kind: "Secret", name: workerName, obj: secret})
}

// TestKEDATriggersMatchConfig: in every rendered overlay, every trigger
// watches the message stream and group the worker reads (from the
// Deployment's configuration) or the runs stream, at the address, database
// and TLS of PYRULA_VALKEY_URL, and authenticates with keys the Secret
// has: the keda component fills them in from the ConfigMap, so that each
// value is written once. The live test checks that the groups exist in
// Valkey once a worker ran.
func TestKEDATriggersMatchConfig(t *testing.T) {
	for dir, wantNS := range kedaOverlays {
		t.Run(dir, func(t *testing.T) { checkKEDATriggers(t, renderedManifests(t, dir), wantNS) })
	}
}

func checkKEDATriggers(t *testing.T, m manifests, wantNS string) {
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	env, _ := podEnv(t, m, container(t, d.Spec.Template.Spec, workerCtr))
	// The TLS files exist only in the pod: check where they point, then
	// load the rest.
	files := []string{"PYRULA_VALKEY_CA_FILE", "PYRULA_VALKEY_CERT_FILE", "PYRULA_VALKEY_KEY_FILE"}
	mounts := container(t, d.Spec.Template.Spec, workerCtr).VolumeMounts
	for _, name := range files {
		if env[name] == "" {
			continue
		}
		if !slices.ContainsFunc(mounts, func(vm corev1.VolumeMount) bool { return strings.HasPrefix(env[name], vm.MountPath+"/") }) {
			t.Errorf("%s is %q, under no volume mounted in the worker", name, env[name])
		}
		delete(env, name)
	}
	cfg, err := loadConfig(t, env)
	if err != nil {
		t.Fatalf("the Deployment's environment does not load: %v", err)
	}
	if cfg.Namespace != wantNS {
		t.Fatalf("PYRULA_NAMESPACE is %q, want %q: the overlay does not move what it should", cfg.Namespace, wantNS)
	}
	so := get[*scaledObject](t, m, "ScaledObject", workerName)
	if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("the ScaledObject does not target Deployment %s", d.Name)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Errorf("minReplicaCount must be at least 1: runs and reclaims need a worker even with an empty message stream")
	}
	secret := get[*corev1.Secret](t, m, "Secret", workerName)
	vu, err := url.Parse(cfg.ValkeyURL)
	if err != nil {
		t.Fatalf("PYRULA_VALKEY_URL does not parse")
	}
	db := cmpOr(strings.TrimPrefix(vu.Path, "/"), "0")
	tls := strconv.FormatBool(vu.Scheme == "rediss")
	watched := map[string]bool{}
	for _, tr := range so.Spec.Triggers {
		md := tr.Metadata
		if tr.Type != "redis-streams" {
			t.Errorf("trigger %s: type %q, want redis-streams", tr.Name, tr.Type)
			continue
		}
		stream, group := md["stream"], md["consumerGroup"]
		switch stream {
		case cfg.CaseStream:
			if group != cfg.ConsumerGroup {
				t.Errorf("trigger %s: group %q, PYRULA_CONSUMER_GROUP is %q", tr.Name, group, cfg.ConsumerGroup)
			}
		case cfg.Namespace + ":runs":
			if group == "" {
				t.Errorf("trigger %s: no consumerGroup", tr.Name)
			}
		default:
			t.Errorf("trigger %s: stream %q is neither the message stream %q nor the runs stream %q", tr.Name, stream, cfg.CaseStream, cfg.Namespace+":runs")
		}
		watched[stream] = true
		if md["lagCount"] == "" && md["pendingEntriesCount"] == "" {
			t.Errorf("trigger %s: neither lagCount nor pendingEntriesCount", tr.Name)
		}
		if md["address"] != vu.Host {
			t.Errorf("trigger %s: address %q, PYRULA_VALKEY_URL's is %q", tr.Name, md["address"], vu.Host)
		}
		if cmpOr(md["enableTLS"], "false") != tls {
			t.Errorf("trigger %s: enableTLS %q, but PYRULA_VALKEY_URL's scheme is %s", tr.Name, md["enableTLS"], vu.Scheme)
		}
		if md["databaseIndex"] != db {
			t.Errorf("trigger %s: databaseIndex %q, PYRULA_VALKEY_URL uses database %q", tr.Name, md["databaseIndex"], db)
		}
		if tr.AuthenticationRef == nil {
			t.Errorf("trigger %s: no authenticationRef", tr.Name)
			continue
		}
		ta := get[*triggerAuthentication](t, m, "TriggerAuthentication", tr.AuthenticationRef.Name)
		for _, ref := range ta.Spec.SecretTargetRef {
			if _, ok := secret.StringData[ref.Key]; ref.Name != secret.Name || !ok {
				t.Errorf("TriggerAuthentication %s: %s from Secret %s key %s, which secret.example.yaml does not have", ta.Name, ref.Parameter, ref.Name, ref.Key)
			}
		}
	}
	if !watched[cfg.CaseStream] || !watched[cfg.Namespace+":runs"] {
		t.Errorf("the triggers watch %v; want the message stream and the runs stream", watched)
	}
}

// TestHPATarget: the plain HPA scales the worker's Deployment.
func TestHPATarget(t *testing.T) {
	m := loadManifests(t)
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	hpa := get[*autoscalingv2.HorizontalPodAutoscaler](t, m, "HorizontalPodAutoscaler", workerName)
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("the HPA does not target Deployment %s", d.Name)
	}
}

// TestScalingFollowsConcurrency: the KEDA triggers and the plain HPA add
// pods at the same points, derived from the ConfigMap's concurrency: busy
// pods at 3/4 of PYRULA_CONCURRENCY messages and of PYRULA_RUN_CONCURRENCY
// runs in flight (pending entries, for KEDA), runs waiting at one pod's
// PYRULA_RUN_CONCURRENCY; and their comments give no other number.
func TestScalingFollowsConcurrency(t *testing.T) {
	m := loadManifests(t)
	cfg, _ := deployedConfig(t, m)
	threeQuarters := func(n int) string { return strconv.Itoa(max(1, n*3/4)) }
	wantMessages, wantRuns := threeQuarters(cfg.Concurrency), threeQuarters(cfg.RunConcurrency)

	so := get[*scaledObject](t, m, "ScaledObject", workerName)
	for _, tr := range so.Spec.Triggers {
		md := tr.Metadata
		runs := strings.HasSuffix(md["stream"], ":runs")
		switch {
		case md["pendingEntriesCount"] != "" && !runs && md["pendingEntriesCount"] != wantMessages:
			t.Errorf("KEDA trigger %s: pendingEntriesCount %s, want 3/4 of PYRULA_CONCURRENCY %d: %s", tr.Name, md["pendingEntriesCount"], cfg.Concurrency, wantMessages)
		case md["pendingEntriesCount"] != "" && runs && md["pendingEntriesCount"] != wantRuns:
			t.Errorf("KEDA trigger %s: pendingEntriesCount %s, want 3/4 of PYRULA_RUN_CONCURRENCY %d: %s", tr.Name, md["pendingEntriesCount"], cfg.RunConcurrency, wantRuns)
		case md["lagCount"] != "" && runs && md["lagCount"] != strconv.Itoa(cfg.RunConcurrency):
			t.Errorf("KEDA trigger %s: lagCount %s, want PYRULA_RUN_CONCURRENCY %d", tr.Name, md["lagCount"], cfg.RunConcurrency)
		}
	}
	hpa := get[*autoscalingv2.HorizontalPodAutoscaler](t, m, "HorizontalPodAutoscaler", workerName)
	for _, metric := range hpa.Spec.Metrics {
		if metric.Pods == nil {
			continue
		}
		want := map[string]string{"pyrula_worker_messages_in_flight": wantMessages, "pyrula_worker_runs_in_flight": wantRuns}[metric.Pods.Metric.Name]
		if got := metric.Pods.Target.AverageValue; want != "" && (got == nil || got.String() != want) {
			t.Errorf("HPA metric %s: averageValue %v, want %s (as KEDA's pending-entries trigger)", metric.Pods.Metric.Name, got, want)
		}
	}
	// A number in a comment next to a setting's name goes stale: the
	// comments name the settings, the test checks the values.
	stale := regexp.MustCompile(`PYRULA_(RUN_)?CONCURRENCY \(\d+\)`)
	for _, f := range []string{"keda/scaledobject.yaml", "hpa/hpa.yaml"} {
		if loc := stale.Find(mustRead(t, f)); loc != nil {
			t.Errorf("%s: the comment %q gives a number; name the setting only", f, loc)
		}
	}
}

// dockerfile returns the Dockerfile with continuation lines joined.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n")
}

func dockerfileUser(t *testing.T) int64 {
	t.Helper()
	var user string
	for _, l := range dockerfile(t) {
		if strings.HasPrefix(l, "USER ") {
			user = strings.TrimSpace(strings.TrimPrefix(l, "USER "))
		}
	}
	uid, err := strconv.ParseInt(strings.Split(user, ":")[0], 10, 64)
	if err != nil || uid == 0 {
		t.Fatalf("the Dockerfile's last USER %q must be a numeric non-root uid (runAsNonRoot can only check a number)", user)
	}
	return uid
}

var goBuild = regexp.MustCompile(`CGO_ENABLED=0 go build .*`)

// buildLine returns the `CGO_ENABLED=0 go build …` command of a file with
// the -o argument replaced by OUT, split into words.
func buildLine(t *testing.T, file string, lines []string) []string {
	t.Helper()
	var found []string
	for _, l := range lines {
		if s := goBuild.FindString(l); s != "" && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want exactly one `CGO_ENABLED=0 go build` line, found %d", file, len(found))
	}
	// The command ends at a shell operator (scripts/test: `… || rc=$?`).
	var words []string
	for _, w := range strings.Fields(found[0]) {
		if w == "||" || w == "&&" || w == "|" || w == ";" {
			break
		}
		if trimmed, ok := strings.CutSuffix(w, ";"); ok {
			words = append(words, trimmed)
			break
		}
		words = append(words, w)
	}
	for i := range words {
		if words[i] == "-o" && i+1 < len(words) {
			words[i+1] = "OUT"
		}
	}
	return words
}

// TestDockerfile: the image is static, non-root, minimal, exposes the
// worker's port and runs the worker; scripts/test runs its exact build line.
func TestDockerfile(t *testing.T) {
	m := loadManifests(t)
	lines := dockerfile(t)
	var stages, exposed []string
	var entrypoint string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "FROM":
			stages = append(stages, f[1])
		case "EXPOSE":
			exposed = append(exposed, f[1:]...)
		case "ENTRYPOINT":
			entrypoint = strings.Join(f[1:], " ")
		}
	}
	if len(stages) < 2 {
		t.Errorf("want a multi-stage build, got stages %v", stages)
	} else if final := stages[len(stages)-1]; !strings.Contains(final, "distroless/static") && final != "scratch" {
		t.Errorf("final stage %s is not a minimal static base", final)
	}
	d := get[*appsv1.Deployment](t, m, "Deployment", workerName)
	port := containerPort(t, container(t, d.Spec.Template.Spec, workerCtr), intstr.FromString(httpPortName))
	if !slices.Contains(exposed, strconv.Itoa(int(port))) {
		t.Errorf("EXPOSE %v does not include the worker's port %d", exposed, port)
	}
	if !strings.Contains(entrypoint, "worker") {
		t.Errorf("ENTRYPOINT %s is not the worker", entrypoint)
	}
	build := buildLine(t, "Dockerfile", lines)
	for _, want := range []string{"-trimpath", "./cmd/worker", "./cmd/pyrula"} {
		if !slices.Contains(build, want) {
			t.Errorf("the Dockerfile's go build lacks %s: %q", want, build)
		}
	}
	if !strings.Contains(strings.Join(build, " "), "-X github.com/pyrula/caseworker/version.Version=${VERSION}") {
		t.Errorf("the Dockerfile's go build does not stamp the version: %q", build)
	}
	script, err := os.ReadFile("../scripts/test")
	if err != nil {
		t.Fatal(err)
	}
	if got := buildLine(t, "scripts/test", strings.Split(string(script), "\n")); !slices.Equal(got, build) {
		t.Errorf("scripts/test builds with\n  %q\nthe Dockerfile with\n  %q", got, build)
	}
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l == "go.mod" || l == "go.sum" || l == "cmd" || l == "*.go" || l == "**/*.sql" {
			t.Errorf(".dockerignore excludes %s, which the build needs", l)
		}
	}
}
