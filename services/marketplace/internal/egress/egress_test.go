package egress_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/marketplace/internal/egress"
)

// A worker reaches exactly its list, over HTTPS (CONNECT) and plain HTTP;
// everything else is refused with the reason, and every connection is
// audited with its bytes. All on loopback: the worker is this test.
func TestProxy(t *testing.T) {
	t.Parallel()
	allowedTLS := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "allowed over TLS") }))
	defer allowedTLS.Close()
	allowedHTTP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "allowed in the clear") }))
	defer allowedHTTP.Close()
	denied := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secret") }))
	defer denied.Close()

	var mu sync.Mutex
	var records []egress.Record
	p := egress.New(func(r egress.Record) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
	}, nil)
	proxy := httptest.NewServer(p)
	defer proxy.Close()
	host := func(s *httptest.Server) string {
		return strings.TrimPrefix(strings.TrimPrefix(s.URL, "https://"), "http://")
	}
	p.Grant("127.0.0.1", egress.Grant{Journey: "j1", Allowed: []string{host(allowedTLS), strings.ToUpper(host(allowedHTTP))}})

	proxyURL, _ := url.Parse(proxy.URL)
	tr := allowedTLS.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(proxyURL)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(u string) (string, error) {
		resp, err := client.Get(u)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + ": " + string(b), nil
	}

	if got, err := get(allowedTLS.URL); err != nil || got != "200 OK: allowed over TLS" {
		t.Errorf("allowed HTTPS: %q, %v", got, err)
	}
	if got, err := get(allowedHTTP.URL); err != nil || got != "200 OK: allowed in the clear" {
		t.Errorf("allowed HTTP: %q, %v", got, err)
	}
	if got, err := get(denied.URL); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("denied HTTPS: %q, %v", got, err)
	}
	if got, err := get("http://" + host(denied) + "/"); err != nil || !strings.HasPrefix(got, "403 Forbidden: Meshwork egress proxy: refused: "+host(denied)+" is not in the worker's egress list") {
		t.Errorf("denied HTTP: %q, %v", got, err)
	}
	p.Revoke("127.0.0.1")
	tr.CloseIdleConnections()
	if got, err := get(allowedHTTP.URL); err != nil || !strings.Contains(got, "refused: the source address 127.0.0.1 is no egress worker's") {
		t.Errorf("after revoke: %q, %v", got, err)
	}

	tr.CloseIdleConnections() // ends the allowed tunnel, which reports its bytes
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(records)
		mu.Unlock()
		if n >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var allowed, refused int
	var tunnelSent int64
	for _, r := range records {
		tunnelSent = max(tunnelSent, r.Sent)
		t.Logf("%+v", r)
		if r.Allowed {
			allowed++
			if r.Journey != "j1" || r.Received == 0 {
				t.Errorf("allowed record without journey or bytes: %+v", r)
			}
		} else {
			refused++
			if r.Reason == "" {
				t.Errorf("refused record without a reason: %+v", r)
			}
		}
	}
	if tunnelSent == 0 {
		t.Error("the HTTPS tunnel reported no bytes sent")
	}
	if allowed != 2 || refused != 3 {
		t.Errorf("%d allowed and %d refused records, want 2 and 3", allowed, refused)
	}
}
