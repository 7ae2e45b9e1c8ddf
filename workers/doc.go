// Package workers is Meshwork's default worker catalog: one YAML definition
// per worker, the prompts they reference, and the JSON Schema editors use to
// validate the format. Binaries embed it so they run without a catalog
// directory; a directory given at run time replaces it.
package workers
