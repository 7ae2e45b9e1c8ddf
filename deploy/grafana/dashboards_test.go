package grafana_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v4"

	"github.com/meshwork/meshwork/deploy/grafana"
)

// resourceLabels are on every series that came through OTLP: Prometheus
// makes job and instance of service.name and service.instance.id.
var resourceLabels = []string{"job", "instance", "service_name", "service_instance_id"}

// dashboards are the dashboards' files and their uids, which links and
// bookmarks rely on: never change one.
var dashboards = map[string]string{
	"runs.json":    "meshwork-runs",
	"workers.json": "meshwork-workers",
	"agents.json":  "meshwork-agents",
}

// homeDashboard is Grafana's home page.
const homeDashboard = "meshwork-runs"

// datasourceTypes are the datasources grafana/otel-lgtm provisions (its
// grafana-datasources.yaml), by uid, and Grafana's built-in ones.
var datasourceTypes = map[string]string{
	"prometheus":    "prometheus",
	"tempo":         "tempo",
	"loki":          "loki",
	"-- Grafana --": "grafana",
	"grafana":       "datasource",
}

// The image's provisioning directory, where compose mounts our provider.
const lgtmDashboardProviders = "/otel-lgtm/grafana/conf/provisioning/dashboards/"

type dashboard struct {
	file string
	raw  map[string]any
}

func loadDashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []dashboard
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if dec.More() {
			t.Fatalf("%s: data after the dashboard", f)
		}
		out = append(out, dashboard{file: filepath.Base(f), raw: raw})
	}
	return out
}

func TestDashboardsAreTheKnownOnes(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	found := map[string]bool{}
	for _, d := range loadDashboards(t) {
		found[d.file] = true
		want, ok := dashboards[d.file]
		if !ok {
			t.Errorf("%s: a dashboard the test does not know: add it to dashboards", d.file)
			continue
		}
		uid, _ := d.raw["uid"].(string)
		if uid != want {
			t.Errorf("%s: uid %q, want %q (uids are stable: links use them)", d.file, uid, want)
		}
		if prev, dup := seen[uid]; dup {
			t.Errorf("%s: uid %q is %s's too", d.file, uid, prev)
		}
		seen[uid] = d.file
		if title, _ := d.raw["title"].(string); !strings.HasPrefix(title, "Meshwork: ") {
			t.Errorf("%s: title %q does not start with \"Meshwork: \"", d.file, title)
		}
		if v, _ := d.raw["schemaVersion"].(json.Number).Int64(); v < 36 {
			t.Errorf("%s: schemaVersion %d, want 36 or later", d.file, v)
		}
		if tags, _ := d.raw["tags"].([]any); !slices.Contains(tags, any("meshwork")) {
			t.Errorf("%s: no tag meshwork (the dashboards' links list the dashboards by it)", d.file)
		}
		ids := map[string]bool{}
		for _, p := range panels(d.raw) {
			id := fmt.Sprint(p["id"])
			if ids[id] {
				t.Errorf("%s: panel id %s used twice", d.file, id)
			}
			ids[id] = true
			if _, ok := p["gridPos"].(map[string]any); !ok {
				t.Errorf("%s: panel %s has no gridPos", d.file, id)
			}
		}
	}
	for f := range dashboards {
		if !found[f] {
			t.Errorf("dashboards/%s is missing", f)
		}
	}
}

// panels returns every panel, those inside collapsed rows too.
func panels(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func([]any)
	walk = func(ps []any) {
		for _, p := range ps {
			pm, ok := p.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, pm)
			if inner, ok := pm["panels"].([]any); ok {
				walk(inner)
			}
		}
	}
	ps, _ := d["panels"].([]any)
	walk(ps)
	return out
}

// datasourceRefs returns every {"type", "uid"} datasource reference of d
// with where it is.
func datasourceRefs(d dashboard) map[string]map[string]any {
	refs := map[string]map[string]any{}
	var walk func(string, any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "datasource" {
					if ref, ok := e.(map[string]any); ok {
						refs[where+".datasource"] = ref
						continue
					}
					if e != nil {
						// A datasource by name (a string) breaks when
						// the name changes; uids do not.
						refs[where+".datasource"] = map[string]any{"uid": e, "type": "by name"}
						continue
					}
				}
				walk(where+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", where, i), e)
			}
		}
	}
	walk(d.file, d.raw)
	return refs
}

func TestDatasourcesAreProvisioned(t *testing.T) {
	t.Parallel()
	for _, d := range loadDashboards(t) {
		refs := datasourceRefs(d)
		if len(refs) == 0 {
			t.Errorf("%s: no datasource at all", d.file)
		}
		for where, ref := range refs {
			uid, _ := ref["uid"].(string)
			typ, _ := ref["type"].(string)
			want, known := datasourceTypes[uid]
			switch {
			case !known:
				t.Errorf("%s: datasource uid %v is not one grafana/otel-lgtm provisions (%v)", where, ref["uid"], slices.Sorted(maps.Keys(datasourceTypes)))
			case typ != want:
				t.Errorf("%s: datasource %s has type %q, want %q", where, uid, typ, want)
			}
		}
	}
}

// query is one query of a dashboard: a PromQL expression, a template
// variable's label_values(...), or a TraceQL query.
type query struct {
	where, kind, text string
}

func queries(d dashboard) []query {
	var out []query
	for _, p := range panels(d.raw) {
		targets, _ := p["targets"].([]any)
		for i, tg := range targets {
			tm, _ := tg.(map[string]any)
			ds, _ := tm["datasource"].(map[string]any)
			if ds == nil {
				ds, _ = p["datasource"].(map[string]any)
			}
			where := fmt.Sprintf("%s: panel %q target %d", d.file, p["title"], i)
			switch ds["uid"] {
			case "prometheus":
				expr, _ := tm["expr"].(string)
				out = append(out, query{where, "promql", expr})
			case "tempo":
				q, _ := tm["query"].(string)
				out = append(out, query{where, "traceql", q})
			}
		}
	}
	templating, _ := d.raw["templating"].(map[string]any)
	vars, _ := templating["list"].([]any)
	for _, v := range vars {
		vm, _ := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		q := vm["query"]
		if qm, ok := q.(map[string]any); ok {
			q = qm["query"]
		}
		s, _ := q.(string)
		out = append(out, query{fmt.Sprintf("%s: variable %s", d.file, vm["name"]), "variable", s})
	}
	return out
}

// grafanaVariables stand for what Grafana puts in a query before it runs.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	"$pipeline", ".*", "$worker", ".*", "$backend", ".*", "${trace_id}", "0123456789abcdef0123456789abcdef",
)

func TestPromQLParsesAndNamesServiceMetrics(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	for _, d := range loadDashboards(t) {
		for _, q := range queries(d) {
			switch q.kind {
			case "promql":
				for _, name := range checkPromQL(t, q.where, q.text) {
					used[name] = true
				}
			case "variable":
				m := labelValues.FindStringSubmatch(q.text)
				if m == nil {
					t.Errorf("%s: %q is not label_values(metric, label)", q.where, q.text)
					continue
				}
				name, label := m[1], m[2]
				spec, ok := lookupMetric(name)
				if !ok {
					t.Errorf("%s: metric %s is not one the services emit", q.where, name)
					continue
				}
				if !slices.Contains(spec.Labels, label) {
					t.Errorf("%s: %s has no label %s (it has %v)", q.where, name, label, spec.Labels)
				}
			}
		}
	}
	// Every metric of the contract is on a dashboard, but the ones that
	// only help others.
	for name := range grafana.Metrics {
		if !used[name] && name != "orchestrator_runs_scrape_ok" {
			t.Errorf("metric %s is on no dashboard", name)
		}
	}
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// lookupMetric finds a series name's metric: histograms' series are
// <name>_bucket, _sum and _count.
func lookupMetric(series string) (grafana.Metric, bool) {
	if m, ok := grafana.Metrics[series]; ok && m.Kind != grafana.Histogram {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if m, ok := grafana.Metrics[base]; ok && m.Kind == grafana.Histogram {
				if suffix == "_bucket" {
					m.Labels = append(slices.Clone(m.Labels), "le")
				}
				return m, true
			}
		}
	}
	return grafana.Metric{}, false
}

// checkPromQL parses expr and checks every series it selects against the
// contract; it returns the metrics named.
func checkPromQL(t *testing.T, where, expr string) []string {
	t.Helper()
	if strings.TrimSpace(expr) == "" {
		t.Errorf("%s: empty expression", where)
		return nil
	}
	substituted := grafanaVariables.Replace(expr)
	if strings.Contains(substituted, "$") {
		t.Errorf("%s: a Grafana variable the test does not know in %q", where, expr)
		return nil
	}
	root, err := parser.NewParser(parser.Options{}).ParseExpr(substituted)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	var names []string
	var selectorLabels []string
	parser.Inspect(root, func(node parser.Node, path []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				name = m.Value
			}
		}
		spec, ok := lookupMetric(name)
		if !ok {
			t.Errorf("%s: %q selects %q, not a metric the services emit", where, expr, name)
			return nil
		}
		base := name
		if spec.Kind == grafana.Histogram {
			base = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		}
		names = append(names, base)
		labels := append(slices.Clone(spec.Labels), resourceLabels...)
		selectorLabels = append(selectorLabels, labels...)
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" && !slices.Contains(labels, m.Name) {
				t.Errorf("%s: %q matches label %s, which %s does not have (%v)", where, expr, m.Name, name, spec.Labels)
			}
		}
		// A counter means something only as a rate or an increase, and a
		// histogram's buckets only through a rate too.
		if spec.Kind == grafana.Counter || (spec.Kind == grafana.Histogram && strings.HasSuffix(name, "_bucket")) {
			if !insideRate(path) {
				t.Errorf("%s: %q uses %s outside rate() or increase()", where, expr, name)
			}
		}
		return nil
	})
	// Grouping labels must be labels of a selected metric.
	parser.Inspect(root, func(node parser.Node, _ []parser.Node) error {
		if agg, ok := node.(*parser.AggregateExpr); ok && !agg.Without {
			for _, l := range agg.Grouping {
				if !slices.Contains(selectorLabels, l) {
					t.Errorf("%s: %q groups by %s, a label of none of its metrics", where, expr, l)
				}
			}
		}
		return nil
	})
	return names
}

func insideRate(path []parser.Node) bool {
	for i := len(path) - 1; i >= 0; i-- {
		if call, ok := path[i].(*parser.Call); ok {
			return slices.Contains([]string{"rate", "irate", "increase"}, call.Func.Name)
		}
	}
	return false
}

// traceServices finds the service names a TraceQL query names.
var traceServices = regexp.MustCompile(`resource\.service\.name\s*(=~|=)\s*"([^"]*)"`)

func TestTraceQLNamesTheStacksServices(t *testing.T) {
	t.Parallel()
	services := composeServiceNames(t)
	for _, d := range loadDashboards(t) {
		for _, q := range queries(d) {
			if q.kind != "traceql" {
				continue
			}
			text := grafanaVariables.Replace(q.text)
			if strings.TrimSpace(text) == "" {
				t.Errorf("%s: empty TraceQL query", q.where)
				continue
			}
			if strings.Count(text, "{") != strings.Count(text, "}") || strings.Count(text, `"`)%2 != 0 {
				t.Errorf("%s: %q has unbalanced braces or quotes", q.where, q.text)
			}
			for _, m := range traceServices.FindAllStringSubmatch(text, -1) {
				op, value := m[1], m[2]
				names := []string{value}
				if op == "=~" {
					names = strings.Split(value, "|")
				}
				for _, n := range names {
					if !slices.Contains(services, n) {
						t.Errorf("%s: service %q is no OTEL_SERVICE_NAME of compose.yaml (%v)", q.where, n, services)
					}
				}
			}
		}
	}
}

// compose is the part of deploy/compose.yaml this test reads.
type compose struct {
	Services map[string]struct {
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

func composeServiceNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, s := range loadCompose(t).Services {
		if n := s.Environment["OTEL_SERVICE_NAME"]; n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		t.Fatal("compose.yaml: no service has an OTEL_SERVICE_NAME")
	}
	return names
}

// mount is one bind mount of the lgtm service.
type mount struct {
	host, container string
	readOnly        bool
}

// lgtmMounts returns lgtm's bind mounts, host paths relative to this
// directory (compose resolves them from deploy/).
func lgtmMounts(t *testing.T, c compose) []mount {
	t.Helper()
	lgtm, ok := c.Services["lgtm"]
	if !ok {
		t.Fatal("compose.yaml: no lgtm service")
	}
	var out []mount
	for _, v := range lgtm.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
			continue // a named volume
		}
		host := filepath.Join("..", parts[0])
		out = append(out, mount{host: host, container: parts[1], readOnly: len(parts) > 2 && strings.Contains(parts[2], "ro")})
	}
	return out
}

// hostPath maps a path inside the lgtm container onto this checkout through
// the bind mounts ("" when no mount holds it).
func hostPath(mounts []mount, inContainer string) string {
	for _, m := range mounts {
		if inContainer == m.container {
			return m.host
		}
		if rest, ok := strings.CutPrefix(inContainer, m.container+"/"); ok {
			return filepath.Join(m.host, filepath.FromSlash(rest))
		}
	}
	return ""
}

func TestComposeMountsProvisioningAndHome(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	mounts := lgtmMounts(t, c)
	for _, m := range mounts {
		if !m.readOnly {
			t.Errorf("compose.yaml: lgtm mounts %s read-write; Grafana needs to read it only", m.host)
		}
		if _, err := os.Stat(m.host); err != nil {
			t.Errorf("compose.yaml: lgtm mounts %s, which does not exist: %v", m.host, err)
		}
	}

	// The home dashboard.
	home := c.Services["lgtm"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if home == "" {
		t.Error("compose.yaml: lgtm sets no GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
	} else if p := hostPath(mounts, home); p == "" {
		t.Errorf("compose.yaml: the home dashboard %s is in no mount of lgtm", home)
	} else if uid := dashboards[filepath.Base(p)]; uid != homeDashboard || filepath.Dir(p) != filepath.Join("..", "grafana", "dashboards") {
		t.Errorf("compose.yaml: the home dashboard %s is %s, want the dashboard %s", home, p, homeDashboard)
	} else if _, err := os.Stat(p); err != nil {
		t.Errorf("compose.yaml: the home dashboard %s: %v", home, err)
	}

	// The providers: mounted into the image's provisioning directory, and
	// reading the directory of the dashboards this test checks.
	var providers []string
	for _, m := range mounts {
		if strings.HasPrefix(m.container, lgtmDashboardProviders) && path.Ext(m.container) == ".yaml" {
			providers = append(providers, m.host)
		}
	}
	if len(providers) == 0 {
		t.Fatalf("compose.yaml: lgtm mounts no dashboard provider into %s", lgtmDashboardProviders)
	}
	for _, file := range providers {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			APIVersion int `yaml:"apiVersion"`
			Providers  []struct {
				Name    string `yaml:"name"`
				Type    string `yaml:"type"`
				Folder  string `yaml:"folder"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if cfg.APIVersion != 1 || len(cfg.Providers) == 0 {
			t.Errorf("%s: want apiVersion 1 and a provider", file)
		}
		for _, p := range cfg.Providers {
			if p.Type != "file" || p.Folder != "Meshwork" {
				t.Errorf("%s: provider %s: type %q folder %q, want file and Meshwork", file, p.Name, p.Type, p.Folder)
			}
			dir := hostPath(mounts, p.Options.Path)
			if filepath.Clean(dir) != filepath.Join("..", "grafana", "dashboards") {
				t.Errorf("%s: provider %s reads %s, which lgtm's mounts make %q, not deploy/grafana/dashboards", file, p.Name, p.Options.Path, dir)
			}
		}
	}
}
