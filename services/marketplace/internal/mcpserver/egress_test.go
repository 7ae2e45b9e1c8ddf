package mcpserver_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// An egress worker reaches exactly its list, through the marketplace's
// proxy, and nothing else. The test starts its own "allowed" and "denied"
// HTTP servers (mesh-exec's /healthz, in containers on a bridge network of
// its own, which the proxy on the host reaches); from inside a shell_v1
// worker made an egress worker: the allowed server answers through the
// proxy, the denied one is refused by the proxy with the reason and
// audited, a direct connection to the denied server's address has no
// route, and no name resolves.
func TestEgressWorker(t *testing.T) {
	t.Parallel()
	requireImage(t, "meshwork/shell-worker:latest")
	requireImage(t, "meshwork/mesh-exec:latest")
	var allowed, denied string // filled in below, before the catalog is read
	b := &bundle{egress: true}
	b.adjust = func(d *meshtype.Definition) {
		if d.ID == "shell_v1" {
			d.Isolation.Network = meshtype.NetworkEgress
			d.Isolation.Egress = []string{allowed}
			d.Constraints.Commands = append(d.Constraints.Commands, "bash -c")
		}
	}
	label := "egress-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	servers := "meshwork-test-servers-" + label
	docker := func(args ...string) string { return dockertest.Docker(t, args...) }
	docker("network", "create", "--label", "meshwork.test="+label, servers)
	t.Cleanup(func() { removeLabelled(t, label) })
	for _, name := range []string{"allowed", "denied"} {
		docker("run", "-d", "--label", "meshwork.test="+label, "--network", servers, "--name", servers+"-"+name,
			"-e", "MESH_EXEC_TOKEN=egress-test-token-0123456789", "meshwork/mesh-exec:latest", "serve", "--transport", "http", "--addr", ":8081")
	}
	ip := func(name string) string {
		return docker("inspect", "-f", "{{(index .NetworkSettings.Networks \""+servers+"\").IPAddress}}", servers+"-"+name)
	}
	allowed, denied = ip("allowed")+":8081", ip("denied")+":8081"
	setupWith(t, b)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "shell_v1", "journey_id": "out"})
	if got := mustJSON(t, must(t, cs, "list_workers", map[string]any{})); !strings.Contains(got, `"egress":["`+allowed+`"]`) || !strings.Contains(got, `"network":"egress"`) || !strings.Contains(got, `"network":"none"`) {
		t.Errorf("list_workers does not show the networks: %s", got)
	}

	bash := func(script string) string {
		t.Helper()
		res := must(t, cs, "execute_in_worker", execArgs("out", map[string]any{"type": "exec", "command": []string{"bash", "-c", script}}))
		out, _ := res["output"].(map[string]any)
		text, _ := out["stdout"].(string)
		t.Logf("%s\n-> %s%v", script, text, out["stderr"])
		return text
	}
	// Through the proxy: bash speaks HTTP to it by hand.
	viaProxy := `p=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${p%:*}/${p##*:} || exit 1; `
	if got := bash(viaProxy + `printf 'GET http://` + allowed + `/healthz HTTP/1.1\r\nHost: ` + allowed + `\r\nConnection: close\r\n\r\n' >&3; head -1 <&3`); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("the allowed server through the proxy: %q", got)
	}
	if got := bash(viaProxy + `printf 'CONNECT ` + denied + ` HTTP/1.1\r\nHost: ` + denied + `\r\n\r\n' >&3; cat <&3`); !strings.Contains(got, "403") || !strings.Contains(got, denied+" is not in the worker's egress list") {
		t.Errorf("the denied server through the proxy: %q", got)
	}
	deniedHost, deniedPort, _ := strings.Cut(denied, ":")
	if got := bash(`timeout 5 bash -c 'exec 3<>/dev/tcp/` + deniedHost + `/` + deniedPort + `' 2>/dev/null && echo reached || echo unreachable`); strings.TrimSpace(got) != "unreachable" {
		t.Errorf("a direct connection to the denied server: %q", got)
	}
	if got := bash(`getent hosts example.com || echo no-name`); strings.TrimSpace(got) != "no-name" {
		t.Errorf("name resolution: %q", got)
	}

	// Every connection is audited under the journey.
	rows, err := b.pool.Query(context.Background(), `SELECT a.target, a.decision, a.response_bytes, a.violations::text FROM actions a
		JOIN journeys j ON j.uid = a.journey_uid WHERE j.id = 'out' AND a.action_type = 'egress' ORDER BY a.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var target, decision, violations string
		var received int64
		if err := rows.Scan(&target, &decision, &received, &violations); err != nil {
			t.Fatal(err)
		}
		t.Logf("audit: %s %s %d bytes %s", target, decision, received, violations)
		if decision == "allowed" && received == 0 {
			t.Errorf("allowed connection to %s without bytes", target)
		}
		got = append(got, target+" "+decision)
	}
	if want := allowed + " allowed\n" + denied + " refused"; strings.Join(got, "\n") != want {
		t.Errorf("egress audit rows:\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}

	// Another marketplace on the database, with a proxy of its own: it
	// knows the worker (its address is recorded with the journey) and lets
	// it through to its list, and no further. After the stop, neither does.
	r := b.replica(t)
	viaReplica := `p=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${p%:*}/` + strconv.Itoa(r.egressPort) + ` || exit 1; `
	get := `printf 'GET http://` + allowed + `/healthz HTTP/1.1\r\nHost: ` + allowed + `\r\nConnection: close\r\n\r\n' >&3; head -1 <&3`
	if got := bash(viaReplica + get); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("the allowed server through the other marketplace's proxy: %q", got)
	}
	if got := bash(viaReplica + `printf 'CONNECT ` + denied + ` HTTP/1.1\r\nHost: ` + denied + `\r\n\r\n' >&3; cat <&3`); !strings.Contains(got, "403") {
		t.Errorf("the denied server through the other marketplace's proxy: %q", got)
	}
	var addr string
	if err := b.pool.QueryRow(context.Background(), `SELECT egress_addr FROM journeys WHERE id = 'out'`).Scan(&addr); err != nil || addr == "" {
		t.Fatalf("the worker's egress address: %q %v", addr, err)
	}
	must(t, cs, "stop_worker", map[string]any{"journey_id": "out"})
	var left *string
	if err := b.pool.QueryRow(context.Background(), `SELECT egress_addr FROM journeys WHERE id = 'out'`).Scan(&left); err != nil || left != nil {
		t.Errorf("a stopped journey keeps its egress address %v (%v)", left, err)
	}
}
