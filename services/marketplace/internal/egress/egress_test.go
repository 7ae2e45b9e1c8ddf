package egress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
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

// A worker holds at most so many connections through the proxy at once;
// one more is refused, audited with the reason, and a closed one makes
// room again.
func TestProxyBoundsAWorkersConnections(t *testing.T) {
	t.Parallel()
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	var mu sync.Mutex
	var reasons []string
	p := egress.New(func(r egress.Record) {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, r.Reason)
	}, nil)
	p.SetMaxConnsPerSource(3)
	p.Grant("127.0.0.1", egress.Grant{Journey: "j1", Allowed: []string{upstream.Addr().String()}})
	proxy := httptest.NewServer(p)
	defer proxy.Close()

	tunnel := func() (net.Conn, string) {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(proxy.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", upstream.Addr(), upstream.Addr())
		status, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("reading the CONNECT's answer: %v", err)
		}
		return c, strings.TrimSpace(status)
	}
	var open []net.Conn
	for i := range 3 {
		c, status := tunnel()
		if !strings.Contains(status, " 200") {
			t.Fatalf("tunnel %d: %q, want 200", i+1, status)
		}
		open = append(open, c)
	}
	c, status := tunnel()
	c.Close()
	if strings.Contains(status, " 200") {
		t.Fatalf("a fourth tunnel at once: %q, want it refused", status)
	}
	mu.Lock()
	refused := slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "holds 3 connections") })
	mu.Unlock()
	if !refused {
		t.Errorf("no audit record says why the fourth was refused: %q", reasons)
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, status := tunnel()
		c.Close()
		if strings.Contains(status, " 200") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one tunnel closed, a new one is still refused: %q", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range open[1:] {
		c.Close()
	}
}

// An upgraded connection (a websocket in the clear) gives its slot back:
// goproxy copies it and never closes its body.
func TestProxyReleasesAnUpgradedConnection(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, "plain")
			return
		}
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		w.WriteHeader(http.StatusSwitchingProtocols)
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}))
	defer upstream.Close()
	p := egress.New(func(egress.Record) {}, nil)
	p.SetMaxConnsPerSource(1)
	host := strings.TrimPrefix(upstream.URL, "http://")
	p.Grant("127.0.0.1", egress.Grant{Journey: "j1", Allowed: []string{host}})
	proxy := httptest.NewServer(p)
	defer proxy.Close()

	c, err := net.Dial("tcp", strings.TrimPrefix(proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", upstream.URL, host)
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(status, " 101") {
		t.Fatalf("the upgrade: %q, %v", status, err)
	}
	proxyURL, _ := url.Parse(proxy.URL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	resp, err := client.Get(upstream.URL + "/plain")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("a request after the upgrade: %s %s, want 200 (the upgrade's slot given back)", resp.Status, b)
	}
}
