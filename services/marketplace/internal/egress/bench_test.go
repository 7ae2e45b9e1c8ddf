package egress_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/marketplace/internal/egress"
)

// BenchmarkProxy1KB is what the egress proxy adds to a 1 KB HTTPS request:
// the same GET over a kept-alive connection, through the proxy's CONNECT
// tunnel and directly, alternating in one run, on loopback.
func BenchmarkProxy1KB(b *testing.B) {
	body := strings.Repeat("k", 1024)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	defer srv.Close()
	p := egress.New(func(egress.Record) {}, nil)
	p.Grant("127.0.0.1", egress.Grant{Journey: "bench", Allowed: []string{strings.TrimPrefix(srv.URL, "https://")}})
	proxy := httptest.NewServer(p)
	defer proxy.Close()
	proxyURL, _ := url.Parse(proxy.URL)

	client := func(viaProxy bool) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if viaProxy {
			tr.Proxy = http.ProxyURL(proxyURL)
		}
		return &http.Client{Transport: tr}
	}
	proxied, direct := client(true), client(false)
	get := func(c *http.Client) time.Duration {
		start := time.Now()
		resp, err := c.Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if n != 1024 {
			b.Fatalf("read %d bytes", n)
		}
		return time.Since(start)
	}
	get(proxied) // the tunnel and the TLS sessions are set up once
	get(direct)
	var viaProxy, straight []time.Duration
	for b.Loop() {
		viaProxy = append(viaProxy, get(proxied))
		straight = append(straight, get(direct))
	}
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	pp, dp := p50(viaProxy), p50(straight)
	b.ReportMetric(float64(pp.Microseconds())/1000, "proxy-p50-ms")
	b.ReportMetric(float64(dp.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64(pp)/float64(dp), "ratio")
}
