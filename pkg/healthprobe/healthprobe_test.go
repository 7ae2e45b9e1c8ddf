package healthprobe_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/healthprobe"
)

func TestCheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer bad.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()

	ctx := context.Background()
	if err := healthprobe.Check(ctx, ok.URL+"/healthz", time.Second); err != nil {
		t.Errorf("healthy server: %v", err)
	}
	for name, tc := range map[string]struct{ url, want string }{
		"503":        {bad.URL, "503"},
		"timeout":    {slow.URL, "deadline"},
		"not http":   {"ftp://x/healthz", "not an http"},
		"no host":    {"http:///healthz", "not an http"},
		"refused":    {"http://127.0.0.1:1/healthz", "health check"},
		"unparsable": {"http://[::1", "not an http"},
	} {
		err := healthprobe.Check(ctx, tc.url, 200*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", name, err, tc.want)
		}
	}
}
