package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServer is one entry of an --mcp-config file's mcpServers.
type mcpServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
}

// loadMCPConfigs reads every --mcp-config value, a file or a JSON string
// (the CLI takes both), into one set of servers.
func loadMCPConfigs(values []string) (map[string]mcpServer, error) {
	servers := map[string]mcpServer{}
	for _, v := range values {
		data, err := jsonValue(v)
		if err != nil {
			return nil, fmt.Errorf("MCP config file not found: %s", v)
		}
		var cfg struct {
			MCPServers map[string]mcpServer `json:"mcpServers"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", v, err)
		}
		if cfg.MCPServers == nil {
			return nil, fmt.Errorf("%s: mcpServers: Does not adhere to MCP server configuration schema", v)
		}
		for name, s := range cfg.MCPServers {
			switch s.Type {
			case "http", "sse":
				if s.URL == "" {
					return nil, fmt.Errorf("%s: mcpServers.%s: url is required", v, name)
				}
			case "", "stdio":
				if s.Command == "" {
					return nil, fmt.Errorf("%s: mcpServers.%s: command is required", v, name)
				}
			default:
				return nil, fmt.Errorf("%s: mcpServers.%s: unknown type %q", v, name, s.Type)
			}
			servers[name] = s
		}
	}
	return servers, nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// mcpCall is the mcp_call step: the tool mcp__<server>__<tool>, called for
// real on the configured server.
func (t *turn) mcpCall(c mcpCallStep) {
	args := c.Arguments
	if args == nil {
		args = json.RawMessage(`{}`)
	}
	var input map[string]any
	_ = json.Unmarshal(args, &input)
	var result string
	t.callTool("mcp__"+c.Server+"__"+c.Tool, input, func() (string, bool, any) {
		text, isError := t.callMCPTool(c.Server, c.Tool, args)
		result = text
		return text, isError, []contentBlock{{Type: "text", Text: text}}
	})
	if c.SaveAs != "" {
		t.write(writeStep{FilePath: c.SaveAs, Content: result})
	}
}

// callMCPTool calls tool on server over streamable HTTP and returns its text
// content and whether it failed.
func (t *turn) callMCPTool(server, tool string, args json.RawMessage) (string, bool) {
	s, ok := t.servers[server]
	switch {
	case !ok:
		return fmt.Sprintf("<tool_use_error>Error: No such tool available: mcp__%s__%s</tool_use_error>", server, tool), true
	case s.Type != "http":
		return fmt.Sprintf("fake claude: MCP server %q has type %q; only http is implemented", server, s.Type), true
	}
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "claude-code", Version: version}, nil)
	headers := make(http.Header)
	for k, v := range s.Headers {
		headers.Set(k, expandEnv(v))
	}
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             s.URL,
		HTTPClient:           &http.Client{Transport: &headerTransport{headers: headers, base: http.DefaultTransport}},
		DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		return fmt.Sprintf("MCP server %q: connecting: %v", server, err), true
	}
	defer session.Close()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return fmt.Sprintf("MCP error: %v", err), true
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	if len(texts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			texts = append(texts, string(b))
		}
	}
	return strings.Join(texts, "\n"), res.IsError
}

// headerTransport adds a server's configured headers to every request.
type headerTransport struct {
	headers http.Header
	base    http.RoundTripper
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range h.headers {
		req.Header[k] = vs
	}
	return h.base.RoundTrip(req)
}

var envRefRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

// expandEnv expands ${VAR} and ${VAR:-default} as the CLI does in MCP
// configs; a lone $ is left alone.
func expandEnv(s string) string {
	return envRefRE.ReplaceAllStringFunc(s, func(ref string) string {
		m := envRefRE.FindStringSubmatch(ref)
		if v, ok := os.LookupEnv(m[1]); ok && v != "" {
			return v
		}
		return m[2]
	})
}
