// Package healthprobe is the container health check of the service images.
// They are built FROM scratch or distroless, with no shell and no curl, so
// each binary probes itself: `<binary> healthcheck [URL]` exits 0 when URL
// (default http://127.0.0.1:<port>/healthz) answers 200 within the timeout,
// and 1 otherwise, printing why.
package healthprobe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// Check asks rawURL once and reports an error unless it answers 200.
func Check(ctx context.Context, rawURL string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("health check URL %q is not an http(s) URL", rawURL)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check: %s answered %s", u.Redacted(), resp.Status)
	}
	return nil
}

// Command is the `healthcheck` subcommand; defaultURL is the service's own
// /healthz on its default port.
func Command(defaultURL string) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [URL]",
		Short: "Exit 0 if the service answers 200 at URL (default " + defaultURL + "); for container health checks",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := defaultURL
			if len(args) == 1 {
				target = args[0]
			}
			return Check(cmd.Context(), target, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
