package httpapi

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/pkg/slowclient"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// exportWorkspace answers GET /v1/runs/{id}/nodes/{node}/workspace: the
// workspace that holds the node's change, whole (a git bundle by default,
// or ?format=tar).
func (a *API) exportWorkspace(w http.ResponseWriter, r *http.Request) {
	if err := a.eng.ExportWorkspace(r.Context(), chi.URLParam(r, "id"), chi.URLParam(r, "node"), r.URL.Query().Get("format"), WriteWorkspace(w)); err != nil {
		a.fail(w, r, err)
	}
}

// WriteWorkspace is the delivery (engine.ExportWorkspace's) that answers
// w with an exported workspace, as the API and the console's download both
// do: an attachment run-<id>-<node>.<format>, its
// digest in Repr-Digest (RFC 9530), its journey in Meshwork-Journey and,
// for a bundle, its commit in Meshwork-Commit.
//
// The download holds one of the engine's export places and the content in
// memory until it is written, so a client too slow to take it is cut off
// (slowclient). Once the answer has begun no error can replace it, so the
// delivery's error is always nil.
func WriteWorkspace(w http.ResponseWriter) func(engine.WorkspaceExport) error {
	return func(out engine.WorkspaceExport) error {
		writeWorkspace(slowclient.Bound(w), out)
		return nil
	}
}

func writeWorkspace(w http.ResponseWriter, out engine.WorkspaceExport) {
	contentType := "application/octet-stream"
	if out.Format == "tar" {
		contentType = "application/x-tar"
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(out.Content)))
	// A run id is a UUID, node ids are [a-z0-9_] (the pipeline's compiler
	// checks them) and the format one of two: the name needs no escaping.
	h.Set("Content-Disposition", `attachment; filename="run-`+out.RunID+"-"+out.NodeID+"."+out.Format+`"`)
	h.Set("Repr-Digest", api.ReprDigest(out.Content))
	h.Set("Meshwork-Journey", out.Journey)
	if out.Commit != "" {
		h.Set("Meshwork-Commit", out.Commit)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Content)
}
