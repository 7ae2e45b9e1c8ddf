// Package meshctl is the command line of the orchestrator's HTTP API: the
// cobra commands of the meshctl binary (run, runs ..., pipelines list),
// which call the API through apiclient and print for people (text, with
// live progress) or for programs (--output json).
//
// Exit codes: 0 for success, 1 for an error (printed as "meshctl: <message>"
// on stderr) or a watched run that failed or was cancelled, 2 for a watched
// run that waits for an approval, 130 when Ctrl-C stopped watching.
package meshctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

// DefaultServer is the orchestrator meshctl calls without --server or
// MESHCTL_SERVER.
const DefaultServer = "http://127.0.0.1:8090"

// config is what the commands take from their surroundings; tests replace
// it.
type config struct {
	getenv func(string) string
	// loc is the time zone times are printed in.
	loc *time.Location
	// reconnectDelay is the client's wait before reconnecting a dropped
	// event stream.
	reconnectDelay time.Duration
}

// app holds the global flags.
type app struct {
	cfg    config
	server string
	token  string
	output string
	// rawOut is standard output as it is, for a patch: byte for byte what
	// git apply is to read.
	rawOut io.Writer
}

// NewRoot returns the meshctl command with all its subcommands.
func NewRoot() *cobra.Command {
	return newRoot(config{getenv: os.Getenv, loc: time.Local, reconnectDelay: 500 * time.Millisecond})
}

func newRoot(cfg config) *cobra.Command {
	a := &app{cfg: cfg}
	root := &cobra.Command{
		Use:   "meshctl",
		Short: "Command line for Meshwork pipelines",
		Long: `meshctl starts pipeline runs on Meshwork's orchestrator and watches them,
and inspects, forks, approves, resumes, cancels and prunes them.

It calls the orchestrator's HTTP API at --server, else $MESHCTL_SERVER, else
` + DefaultServer + `, with the bearer token of --token, else
$MESHCTL_TOKEN. Flags take precedence over the environment. Give the token
by MESHCTL_TOKEN rather than --token: flags show in ps and in shell history.

Exit codes: 0 success; 1 error, or a watched run failed or was cancelled;
2 a watched run waits for an approval; 130 Ctrl-C stopped watching (the run
goes on).`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "text" && a.output != "json" {
				return fmt.Errorf("--output %q: want text or json", a.output)
			}
			// What the orchestrator sends is written through terminalSafe
			// (text) or jsonSafe; a patch is written as it is (rawOut).
			root := cmd.Root()
			a.rawOut = root.OutOrStdout()
			if a.json() {
				root.SetOut(jsonSafe{a.rawOut})
			} else {
				root.SetOut(terminalSafe{a.rawOut})
			}
			root.SetErr(terminalSafe{root.ErrOrStderr()})
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.server, "server", "", "orchestrator URL (default $MESHCTL_SERVER, else "+DefaultServer+")")
	pf.StringVar(&a.token, "token", "", "bearer token of the API (default $MESHCTL_TOKEN; better given by the environment, since flags show in ps and shell history)")
	pf.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	root.AddCommand(a.runCommand(), a.runsCommand(), a.pipelinesCommand(), buildinfo.Command("meshctl"))
	return root
}

func (a *app) json() bool { return a.output == "json" }

func (a *app) serverURL() string {
	if a.server != "" {
		return a.server
	}
	if s := a.cfg.getenv("MESHCTL_SERVER"); s != "" {
		return s
	}
	return DefaultServer
}

func (a *app) tokenValue() string {
	if a.token != "" {
		return a.token
	}
	return a.cfg.getenv("MESHCTL_TOKEN")
}

// client returns a client of the orchestrator the flags name.
func (a *app) client() (*apiclient.Client, error) {
	server := a.serverURL()
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q (--server or MESHCTL_SERVER) is not a URL such as %s", server, DefaultServer)
	}
	c := apiclient.New(server, a.tokenValue(), nil)
	c.ReconnectDelay = a.cfg.reconnectDelay
	return c, nil
}

// hint adds advice to the errors that have an obvious cause.
func (a *app) hint(err error) error {
	var apiErr *apiclient.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized && a.tokenValue() == "":
		return &hintedError{err, "no token was given: set MESHCTL_TOKEN"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &hintedError{err, fmt.Sprintf("is the orchestrator running at %s? Set --server or MESHCTL_SERVER", a.serverURL())}
	}
	return err
}

// hintedError is an error with advice, printed on a line of its own.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }

// ExitError ends meshctl with Code. Err, when not nil, is printed first.
type ExitError struct {
	Code int
	Err  error
}

// Error says what ended meshctl.
func (e *ExitError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Unwrap returns Err.
func (e *ExitError) Unwrap() error { return e.Err }

// Execute runs root and returns the exit code: errors are printed on
// root's stderr as "meshctl: <message>".
func Execute(ctx context.Context, root *cobra.Command) int {
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	stderr := root.ErrOrStderr()
	code := 1
	var exit *ExitError
	if errors.As(err, &exit) {
		code, err = exit.Code, exit.Err
	}
	if err != nil {
		note(stderr, "meshctl: %v\n", err)
	}
	var hinted *hintedError
	if errors.As(err, &hinted) {
		note(stderr, "meshctl: %s\n", hinted.hint)
	}
	return code
}

// exactArgs wants one argument per name, and says which is missing.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return fmt.Errorf("missing %s (usage: %s)", names[len(args)], cmd.UseLine())
		case len(args) > len(names):
			return fmt.Errorf("unexpected argument %q (usage: %s)", args[len(names)], cmd.UseLine())
		}
		return nil
	}
}

// runE wraps a command's work: it builds the client and adds hints to its
// errors.
func (a *app) runE(f func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := a.client()
		if err != nil {
			return err
		}
		return a.hint(f(cmd.Context(), cmd, c, args))
	}
}
