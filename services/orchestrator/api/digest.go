package api

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// ReprDigest is the Repr-Digest header (RFC 9530) of content, as the
// workspace export sends it: "sha-256=:<base64 of its SHA-256>:".
func ReprDigest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// ReprDigestSHA256 reads the SHA-256 out of a Repr-Digest header, a
// dictionary that may name other algorithms too (RFC 9530, RFC 8941); ok
// is false when it names no well-formed sha-256.
func ReprDigestSHA256(header string) (sum []byte, ok bool) {
	for _, member := range strings.Split(header, ",") {
		key, value, found := strings.Cut(strings.TrimSpace(member), "=")
		if !found || key != "sha-256" {
			continue
		}
		value, _, _ = strings.Cut(value, ";") // parameters, if any
		if len(value) < 2 || value[0] != ':' || value[len(value)-1] != ':' {
			return nil, false
		}
		b, err := base64.StdEncoding.DecodeString(value[1 : len(value)-1])
		if err != nil || len(b) != sha256.Size {
			return nil, false
		}
		return b, true
	}
	return nil, false
}
