// Package metrics reads a scrape as Prometheus' own client library does:
// the text exposition format (version 0.0.4) through expfmt's TextParser,
// printed as JSON so that vp2p's tests check a metrics endpoint against the
// parser a Prometheus client stack uses, not against themselves.
package metrics

import (
	"encoding/json"
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one metric of a family: its labels and its value (a counter's
// or a gauge's), or a histogram's count, sum and cumulative buckets.
type Sample struct {
	Labels  map[string]string `json:"labels"`
	Value   *float64          `json:"value,omitempty"`
	Count   *uint64           `json:"count,omitempty"`
	Sum     *float64          `json:"sum,omitempty"`
	Buckets map[string]uint64 `json:"buckets,omitempty"`
}

// Family is a metric family: its type, help and samples.
type Family struct {
	Type    string   `json:"type"`
	Help    string   `json:"help"`
	Samples []Sample `json:"samples"`
}

// Parse reads the text format from in and writes the families as JSON to
// out, by name; a scrape the parser refuses is an error naming where.
func Parse(in io.Reader, out io.Writer) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(in)
	if err != nil {
		return fmt.Errorf("the scrape does not parse: %w", err)
	}
	result := map[string]Family{}
	for name, mf := range families {
		f := Family{Type: mf.GetType().String(), Help: mf.GetHelp()}
		for _, m := range mf.GetMetric() {
			s := Sample{Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v := m.GetCounter().GetValue()
				s.Value = &v
			case dto.MetricType_GAUGE:
				v := m.GetGauge().GetValue()
				s.Value = &v
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				c, sum := h.GetSampleCount(), h.GetSampleSum()
				s.Count, s.Sum = &c, &sum
				s.Buckets = map[string]uint64{}
				for _, b := range h.GetBucket() {
					s.Buckets[fmt.Sprint(b.GetUpperBound())] = b.GetCumulativeCount()
				}
			default:
				v := m.GetUntyped().GetValue()
				s.Value = &v
			}
			f.Samples = append(f.Samples, s)
		}
		result[name] = f
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(result)
}
