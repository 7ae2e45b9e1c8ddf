// Command mcp-echo is the MCP server of the example image behind the
// catalog's kind: mcp worker mcp_echo_v1. It serves two trivial tools, echo
// and add, over stdio, and exists to show (and test) that any image with an
// MCP server on stdio can be a worker, with the gate in front of every call.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/buildinfo"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

type echoOut struct {
	Text string `json:"text" jsonschema:"the same text"`
}

type addIn struct {
	A float64 `json:"a" jsonschema:"the first addend"`
	B float64 `json:"b" jsonschema:"the second addend"`
}

type addOut struct {
	Sum float64 `json:"sum" jsonschema:"a + b"`
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-echo", Version: buildinfo.Version}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Return the text unchanged."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			return nil, echoOut(in), nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two numbers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := s.Run(ctx, &mcp.StdioTransport{})
	stop()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "mcp-echo:", err)
		os.Exit(1)
	}
}
