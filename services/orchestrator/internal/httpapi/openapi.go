package httpapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v4"
)

// openapiYAML is the API's OpenAPI 3.1 document, written by hand; a test
// checks that it documents every route and only routes.
//
//go:embed openapi.yaml
var openapiYAML []byte

// openapiJSON is openapiYAML as JSON, served at /v1/openapi.json.
var openapiJSON = mustJSON(openapiYAML)

func mustJSON(doc []byte) []byte {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		panic(fmt.Sprintf("httpapi: openapi.yaml: %v", err))
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("httpapi: openapi.yaml as JSON: %v", err))
	}
	return out
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiJSON)
}
