package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// The server sends package api's types themselves (the engine returns
// them), and takes what a client sends in its own request types: a start
// request built from api's decodes into the engine's with no field unknown.
func TestTheServerTakesWhatClientsSend(t *testing.T) {
	t.Parallel()
	body, _ := json.Marshal(api.StartRequest{Pipeline: "p", Inputs: map[string]any{"task": "x"}, Thread: "t"})
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var got engine.StartRequest
	if err := dec.Decode(&got); err != nil || got.Pipeline != "p" || got.Thread != "t" || got.Inputs["task"] != "x" {
		t.Errorf("a start request: %+v, %v", got, err)
	}
}

// The export's Repr-Digest is read back from what it writes, and from a
// dictionary that names other algorithms too; a malformed sha-256 member
// is not a digest.
func TestReprDigest(t *testing.T) {
	content := []byte("a bundle")
	sum := sha256.Sum256(content)
	for header, want := range map[string]bool{
		api.ReprDigest(content):                      true,
		"sha-512=:AAAA:, " + api.ReprDigest(content): true,
		api.ReprDigest(content) + ";x=1":             true,
		"sha-256=:AAAA:":                             false, // not 32 bytes
		"sha-256=AAAA":                               false,
		"md5=:AAAA:":                                 false,
		"":                                           false,
	} {
		got, ok := api.ReprDigestSHA256(header)
		if ok != want || (ok && !bytes.Equal(got, sum[:])) {
			t.Errorf("ReprDigestSHA256(%q) = %x, %v; want %v", header, got, ok, want)
		}
	}
}
