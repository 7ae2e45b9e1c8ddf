package httpapi

import (
	"mime"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// exportWorkspace answers GET /v1/runs/{id}/nodes/{node}/workspace: the
// workspace that holds the node's change, whole (a git bundle by default,
// or ?format=tar), with its digest in Repr-Digest (RFC 9530) and, for a
// bundle, its commit in Meshwork-Commit.
func (a *API) exportWorkspace(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "bundle"
	}
	runID, node := chi.URLParam(r, "id"), chi.URLParam(r, "node")
	out, err := a.eng.ExportWorkspace(r.Context(), runID, node, format)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	contentType, ext := "application/octet-stream", ".bundle"
	if format == "tar" {
		contentType, ext = "application/x-tar", ".tar"
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(out.Content)))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": "run-" + out.RunID + "-" + out.NodeID + ext}))
	h.Set("Repr-Digest", api.ReprDigest(out.Content))
	h.Set("Meshwork-Journey", out.Journey)
	if out.Commit != "" {
		h.Set("Meshwork-Commit", out.Commit)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Content)
}
