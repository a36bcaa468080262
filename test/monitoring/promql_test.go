package monitoring

import (
	"fmt"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// kubeProxyJob is the job the scrape setup of deploy/monitoring produces,
// and the kubernetes-mixin's kubeProxySelector.
const kubeProxyJob = "kube-proxy"

// checked is what checkQuery found in one query.
type checked struct {
	// problems are the uses of svcproxy's metrics that cannot work.
	problems []string
	// used are the metric names selected from the kube-proxy job.
	used []string
	// others are the metric names selected from other jobs (or none).
	others []string
	lookup bool
}

// rangeFuncs read how much a series grew: counters only.
var rangeFuncs = []string{"rate", "irate", "increase"}

// checkQuery parses q with Prometheus' parser and checks every selector of
// the kube-proxy job: the metric is one svcproxy serves, its label
// matchers name labels it has, a counter (or a histogram's series) is read
// through rate() or increase() and a gauge never is, and each aggregation
// groups by labels its input has. Selectors of other jobs are only listed.
func checkQuery(inv inventory, q string) (checked, error) {
	return check(inv, q, false)
}

// checkLookup is checkQuery for a query that only looks series up (a
// Grafana variable's label_values()): how a counter is read does not arise.
func checkLookup(inv inventory, q string) (checked, error) {
	return check(inv, q, true)
}

func check(inv inventory, q string, lookup bool) (checked, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		return checked{}, err
	}
	c := checked{lookup: lookup}
	parser.Inspect(expr, func(node parser.Node, path []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			c.selector(inv, n, path)
		case *parser.AggregateExpr:
			c.grouping(inv, n)
		case *parser.Call:
			c.call(n)
		}
		return nil
	})
	return c, nil
}

func (c *checked) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *checked) selector(inv inventory, vs *parser.VectorSelector, path []parser.Node) {
	if !selectsKubeProxy(vs) {
		c.others = append(c.others, vs.Name)
		return
	}
	c.used = append(c.used, vs.Name)
	s, ok := inv.lookup(vs.Name)
	if !ok {
		c.problem("%s: svcproxy serves no such metric", vs.Name)
		return
	}
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel && !s.hasLabel(m.Name) {
			c.problem("%s has no label %q", vs.Name, m.Name)
		}
	}
	if s.family.typ == "histogram" && s.suffix == "" && !c.lookup {
		c.problem("%s is a histogram: select its _bucket, _count or _sum", vs.Name)
		return
	}
	if c.lookup {
		return
	}
	fn := rangeFunc(path)
	switch {
	case s.counting() && fn == "":
		c.problem("%s only grows: read it with rate() or increase()", vs.Name)
	case !s.counting() && fn != "":
		c.problem("%s is a %s: %s() of it means nothing", vs.Name, s.family.typ, fn)
	}
}

// selectsKubeProxy tells whether vs selects the kube-proxy job.
func selectsKubeProxy(vs *parser.VectorSelector) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == "job" && m.Type == labels.MatchEqual && m.Value == kubeProxyJob {
			return true
		}
	}
	return false
}

// rangeFunc is the rate-like function whose range vector holds the
// selector at the end of path, or "".
func rangeFunc(path []parser.Node) string {
	for i := len(path) - 1; i >= 0; i-- {
		switch n := path[i].(type) {
		case *parser.MatrixSelector, *parser.ParenExpr:
			continue
		case *parser.Call:
			if slices.Contains(rangeFuncs, n.Func.Name) {
				return n.Func.Name
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

// grouping checks that by () names labels some input series carry.
func (c *checked) grouping(inv inventory, agg *parser.AggregateExpr) {
	if agg.Without {
		return
	}
	var inputs []series
	parser.Inspect(agg.Expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok && selectsKubeProxy(vs) {
			if s, ok := inv.lookup(vs.Name); ok {
				inputs = append(inputs, s)
			}
		}
		return nil
	})
	if len(inputs) == 0 {
		return
	}
	for _, label := range agg.Grouping {
		if !slices.ContainsFunc(inputs, func(s series) bool { return s.hasLabel(label) }) {
			c.problem("by (%s): %s has no label %q", joinGrouping(agg), inputs[0].name, label)
		}
	}
}

func joinGrouping(agg *parser.AggregateExpr) string {
	s := ""
	for i, l := range agg.Grouping {
		if i > 0 {
			s += ", "
		}
		s += l
	}
	return s
}

// call checks that histogram_quantile's input keeps the buckets apart.
func (c *checked) call(call *parser.Call) {
	if call.Func.Name != "histogram_quantile" || len(call.Args) != 2 {
		return
	}
	arg := call.Args[1]
	for {
		p, ok := arg.(*parser.ParenExpr)
		if !ok {
			break
		}
		arg = p.Expr
	}
	if agg, ok := arg.(*parser.AggregateExpr); ok && !agg.Without && !slices.Contains(agg.Grouping, "le") {
		c.problem("histogram_quantile over by (%s): the buckets need le", joinGrouping(agg))
	}
}
