package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/valkey-io/valkey-go"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/worker"
)

// testVersion is stamped into the release build the tests run.
const testVersion = "v0.0.0-deploytest"

var (
	releaseOnce sync.Once
	releaseDir  string
	releaseErr  error
)

// releaseBuild runs the Dockerfile's go build line (its -o directory
// replaced by a temp dir, VERSION set to testVersion) once per test binary,
// and returns the directory holding worker and pyrula.
func releaseBuild(t *testing.T) string {
	t.Helper()
	words := buildLine(t, "Dockerfile", dockerfile(t))
	releaseOnce.Do(func() {
		releaseDir, releaseErr = os.MkdirTemp("", "pyrula-deploy-test-")
		if releaseErr != nil {
			return
		}
		cmdline := strings.ReplaceAll(strings.Join(words, " "), "OUT", releaseDir+"/")
		cmd := exec.Command("sh", "-c", cmdline)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "VERSION="+testVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			releaseErr = fmt.Errorf("%s: %w\n%s", cmdline, err, out)
		}
	})
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if releaseDir != "" {
		os.RemoveAll(releaseDir)
	}
	os.Exit(code)
}

// TestReleaseBuild: the Dockerfile's build line gives static binaries that
// show the stamped version.
func TestReleaseBuild(t *testing.T) {
	dir := releaseBuild(t)
	for _, name := range []string{"worker", "pyrula"} {
		f, err := elf.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: not a static binary (CGO_ENABLED=0 lost?)", name)
			}
		}
		f.Close()
	}
	out, err := exec.Command(filepath.Join(dir, "worker"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != testVersion {
		t.Fatalf("worker version printed %q, want the stamped %q", got, testVersion)
	}
}

// queries are the PromQL expressions of the alerts, the dashboard and the
// HPA's metrics, each with where it comes from.
type query struct{ where, expr string }

// grafanaVars are replaced before a dashboard expression is parsed.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

func allQueries(t *testing.T, m manifests) []query {
	t.Helper()
	var qs []query
	for _, pr := range all[*monitoringv1.PrometheusRule](m, "PrometheusRule") {
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				qs = append(qs, query{"alert " + r.Alert + r.Record, r.Expr.String()})
			}
		}
	}
	var dash struct {
		UID        string
		Panels     []dashPanel
		Templating struct {
			List []struct {
				Name  string
				Query json.RawMessage
			}
		}
	}
	b, err := os.ReadFile("base/dashboards/pyrula-worker.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("dashboard: panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, query{"dashboard panel " + p.Title, grafanaVars.Replace(tg.Expr)})
		}
	}
	for _, v := range dash.Templating.List {
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			if sm := labelValues.FindStringSubmatch(q.Query); sm != nil {
				qs = append(qs, query{"dashboard variable " + v.Name, sm[1]})
			} else {
				qs = append(qs, query{"dashboard variable " + v.Name, q.Query})
			}
		}
	}
	for _, h := range all[*autoscalingv2.HorizontalPodAutoscaler](m, "HorizontalPodAutoscaler") {
		for _, ms := range h.Spec.Metrics {
			switch {
			case ms.Pods != nil:
				qs = append(qs, query{"HPA " + h.Name, ms.Pods.Metric.Name})
			case ms.External != nil:
				qs = append(qs, query{"HPA " + h.Name, ms.External.Metric.Name})
			case ms.Object != nil:
				qs = append(qs, query{"HPA " + h.Name, ms.Object.Metric.Name})
			}
		}
	}
	return qs
}

type dashPanel struct {
	ID      int
	Type    string
	Title   string
	Targets []struct{ Expr string }
}

// selectors parses expr and returns its vector selectors.
func selectors(expr string) ([]*parser.VectorSelector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out, nil
}

// TestAlertRules: every alert parses, has a severity, a summary, a
// description, a runbook line and a runbook_url whose anchor is a heading of
// docs/operate.md, and its job matchers name the Service Prometheus scrapes.
func TestAlertRules(t *testing.T) {
	m := loadManifests(t)
	svc := get[*corev1.Service](t, m, "Service", workerName)
	doc, err := os.ReadFile("../docs/operate.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "#") {
			anchors[githubAnchor(strings.TrimLeft(l, "# "))] = true
		}
	}
	pr := get[*monitoringv1.PrometheusRule](t, m, "PrometheusRule", workerName)
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				continue
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			for a, text := range r.Annotations {
				// Prometheus expands annotations as Go templates, behind this
				// header and with these functions (among others); a syntax
				// error would show raw in the alert.
				funcs := template.FuncMap{"humanize": fmt.Sprint, "humanizeDuration": fmt.Sprint, "humanizePercentage": fmt.Sprint}
				const header = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
				if _, err := template.New(a).Funcs(funcs).Parse(header + text); err != nil {
					t.Errorf("%s: annotation %s: %v", r.Alert, a, err)
				}
			}
			url := r.Annotations["runbook_url"]
			if _, anchor, _ := strings.Cut(url, "docs/operate.md#"); !anchors[anchor] {
				t.Errorf("%s: runbook_url %s does not point at a heading of docs/operate.md", r.Alert, url)
			}
			sels, err := selectors(r.Expr.String())
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, vs := range sels {
				for _, lm := range vs.LabelMatchers {
					if lm.Name == "job" && (lm.Type != labels.MatchEqual || lm.Value != svc.Name) {
						t.Errorf("%s: matcher %s; Prometheus Operator names the job after the Service, %q", r.Alert, lm, svc.Name)
					}
				}
			}
		}
	}
	if n < 8 {
		t.Errorf("only %d alert rules", n)
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// describedNames returns the names of the metrics worker.New registers,
// from their descriptors: vectors show no series until a label set is
// used, so a scrape alone cannot show them all.
func describedNames(t *testing.T, cfg worker.Config) map[string]bool {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry(), names: map[string]bool{}}
	if _, err := worker.New(cfg, worker.Params{Registerer: rec}); err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	return rec.names
}

// recorder is a Registerer that notes the name of every descriptor it is
// given.
type recorder struct {
	prometheus.Registerer
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) note(c prometheus.Collector) {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if sm := fqName.FindStringSubmatch(d.String()); sm != nil {
			r.names[sm[1]] = true
		}
	}
}

// Register implements prometheus.Registerer.
func (r *recorder) Register(c prometheus.Collector) error {
	r.note(c)
	return r.Registerer.Register(c)
}

// MustRegister implements prometheus.Registerer.
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.note(c)
	}
	r.Registerer.MustRegister(cs...)
}

// runningWorker is the release build of the worker, serving on addr.
type runningWorker struct {
	cmd    *exec.Cmd
	addr   string
	done   chan struct{}
	err    error
	mu     sync.Mutex
	stderr bytes.Buffer
}

func (w *runningWorker) logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.String()
}

func (w *runningWorker) get(path string) (int, string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + w.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startWorker starts the release build with env (and nothing else of the
// test's environment but PATH and HOME) and waits for path to answer 200.
func startWorker(t *testing.T, bin string, env map[string]string, readyPath string) *runningWorker {
	t.Helper()
	w := &runningWorker{addr: env["PYRULA_HTTP_ADDR"], done: make(chan struct{})}
	w.cmd = exec.Command(bin, "serve")
	w.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		w.cmd.Env = append(w.cmd.Env, k+"="+v)
	}
	pr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.mu.Lock()
			w.stderr.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
		}
	}()
	go func() {
		<-scanned
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("worker stderr:\n%s", w.logs())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, err := w.get(readyPath); err == nil && code == http.StatusOK {
			return w
		}
		select {
		case <-w.done:
			t.Fatalf("the worker exited before %s answered 200: %v\n%s", readyPath, w.err, w.logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within 30s\n%s", readyPath, w.logs())
		}
	}
}

// TestLiveWorker runs the release build with the Deployment's configuration
// (namespace, streams, listen address and store changed for the test) and
// checks the probes' paths, the consumer groups the KEDA triggers name, and
// that every alert, dashboard and HPA query names a metric the worker
// exports, then that SIGTERM ends it with exit 0.
func TestLiveWorker(t *testing.T) {
	url := testenv.ValkeyURL(t)
	m := loadManifests(t)
	bin := filepath.Join(releaseBuild(t), "worker")
	_, podEnv := deployedConfig(t, m)

	ns := testenv.UniqueName(t, "deploytest")
	env := map[string]string{}
	for k, v := range podEnv {
		env[k] = v
	}
	// The example Secret's DSN and Valkey login are not a server's.
	delete(env, "PYRULA_POSTGRES_DSN")
	delete(env, "PYRULA_VALKEY_USERNAME")
	delete(env, "PYRULA_VALKEY_PASSWORD")
	env["PYRULA_VALKEY_URL"] = url
	env["PYRULA_NAMESPACE"] = ns // the streams follow it
	env["PYRULA_FIXTURE_STORE"] = "memory:"
	env["PYRULA_CONSUMER_NAME"] = "deploy-test"
	env["PYRULA_HTTP_ADDR"] = freeAddr(t)
	cfg, err := loadConfig(t, env)
	if err != nil {
		t.Fatal(err)
	}
	client := testenv.ValkeyClientAt(t, url, ns)
	paths := probePaths(t, m)
	w := startWorker(t, bin, env, paths["readinessProbe"])

	for what, p := range paths {
		if code, body, err := w.get(p); err != nil || code != http.StatusOK {
			t.Errorf("%s: GET %s: %d %q %v", what, p, code, body, err)
		}
	}

	// The groups the KEDA triggers scale on exist once a worker started.
	so := get[*scaledObject](t, renderedManifests(t, "."), "ScaledObject", workerName)
	for _, tr := range so.Spec.Triggers {
		stream := strings.Replace(tr.Metadata["stream"], cfgNamespace(t, m)+":", ns+":", 1)
		groups := xinfoGroups(t, client, stream)
		if !slices.Contains(groups, tr.Metadata["consumerGroup"]) {
			t.Errorf("trigger %s: group %q is not a group of %s in Valkey (groups: %v)", tr.Name, tr.Metadata["consumerGroup"], stream, groups)
		}
	}

	// Traffic, so that vectors get label sets: a malformed message, a
	// delete_case_bundle (memory store) and a start_run.
	ctx := context.Background()
	zeros := strings.Repeat("0", 64)
	for _, msg := range []string{
		`not json`,
		`{"message_id":"deploy-1","type":"delete_case_bundle","body":{"fixture_hash":"` + zeros + `"}}`,
		`{"message_id":"deploy-2","type":"start_run","body":{"target_name":"checkout"}}`,
	} {
		if err := client.Do(ctx, client.B().Xadd().Key(cfg.CaseStream).Id("*").FieldValue().FieldValue("message", msg).Build()).Error(); err != nil {
			t.Fatalf("XADD: %v", err)
		}
	}
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams = scrape(t, w, paths["ServiceMonitor"])
		if counterSum(fams["pyrula_worker_messages_total"]) >= 3 && fams["pyrula_worker_runs_total"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("after 20s: %v messages answered, runs_total present: %v", counterSum(fams["pyrula_worker_messages_total"]), fams["pyrula_worker_runs_total"] != nil)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if bi := fams["pyrula_worker_build_info"]; bi == nil || len(bi.Metric) != 1 || labelOf(bi.Metric[0], "version") != testVersion {
		t.Errorf("pyrula_worker_build_info does not show the stamped version %q: %v", testVersion, bi)
	}

	scraped := map[string]bool{}
	for name, f := range fams {
		scraped[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			scraped[name+"_bucket"], scraped[name+"_sum"], scraped[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			scraped[name+"_sum"], scraped[name+"_count"] = true, true
		}
	}
	described := describedNames(t, cfg)
	var onlyDescribed, missing []string
	for _, q := range allQueries(t, m) {
		sels, err := selectors(q.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q names no metric", q.where, q.expr)
		}
		for _, vs := range sels {
			name := vs.Name
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			switch {
			case scraped[name]:
			case described[name] || described[base]:
				onlyDescribed = append(onlyDescribed, name)
			default:
				missing = append(missing, fmt.Sprintf("%s (%s)", name, q.where))
			}
		}
	}
	sort.Strings(missing)
	missing = slices.Compact(missing)
	sort.Strings(onlyDescribed)
	onlyDescribed = slices.Compact(onlyDescribed)
	if len(onlyDescribed) > 0 {
		t.Logf("registered but without series in the scrape yet (vectors whose labels were not used): %v", onlyDescribed)
	}
	if len(missing) > 0 {
		t.Errorf("queries name metrics the worker does not export:\n  %s", strings.Join(missing, "\n  "))
	}

	// SIGTERM: the worker stops within PYRULA_SHUTDOWN_GRACE and exits 0,
	// before the kubelet's terminationGracePeriodSeconds.
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
		if w.err != nil {
			t.Errorf("after SIGTERM the worker exited with %v, want 0", w.err)
		}
	case <-time.After(cfg.ShutdownGrace + 5*time.Second):
		t.Errorf("the worker did not exit within PYRULA_SHUTDOWN_GRACE (%v) of SIGTERM", cfg.ShutdownGrace)
	}
}

// cfgNamespace is PYRULA_NAMESPACE as the Deployment sets it.
func cfgNamespace(t *testing.T, m manifests) string {
	t.Helper()
	cfg, _ := deployedConfig(t, m)
	return cfg.Namespace
}

func scrape(t *testing.T, w *runningWorker, path string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, err := w.get(path)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, code, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return fams
}

func counterSum(f *dto.MetricFamily) float64 {
	var n float64
	if f == nil {
		return 0
	}
	for _, m := range f.Metric {
		n += m.GetCounter().GetValue()
	}
	return n
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func xinfoGroups(t *testing.T, c valkey.Client, stream string) []string {
	t.Helper()
	msgs, err := c.Do(context.Background(), c.B().XinfoGroups().Key(stream).Build()).ToArray()
	if err != nil {
		t.Fatalf("XINFO GROUPS %s: %v", stream, err)
	}
	var names []string
	for _, msg := range msgs {
		fields, err := msg.AsMap()
		if err != nil {
			t.Fatalf("XINFO GROUPS %s: %v", stream, err)
		}
		f := fields["name"]
		name, _ := f.ToString()
		names = append(names, name)
	}
	return names
}
