package store

// Callers' bearer tokens, by their SHA-256.

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PutToken records that a token (by its hash) authenticates as caller. A
// token already known keeps working; re-putting it for another caller moves it.
func (s *Store) PutToken(ctx context.Context, caller string, hash []byte, parent *uuid.UUID) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO api_tokens (caller, token_sha256, parent_journey) VALUES ($1, $2, $3)
		ON CONFLICT (token_sha256) DO UPDATE SET caller = excluded.caller, parent_journey = excluded.parent_journey, revoked_at = NULL`,
		caller, hash, parent)
	if err != nil {
		return fmt.Errorf("storing token: %w", err)
	}
	return nil
}

// Caller returns the caller a token hash authenticates as, or ErrNotFound.
func (s *Store) Caller(ctx context.Context, hash []byte) (string, error) {
	var caller string
	err := s.pool.QueryRow(ctx, `SELECT caller FROM api_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL`, hash).Scan(&caller)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("looking up token: %w", err)
	}
	return caller, nil
}

// RevokeNested revokes the tokens minted for an agent journey's nested calls.
func (s *Store) RevokeNested(ctx context.Context, journey uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE parent_journey = $1 AND revoked_at IS NULL`, journey); err != nil {
		return fmt.Errorf("revoking nested tokens: %w", err)
	}
	return nil
}

// RevokeConfiguredExcept revokes the operator-configured tokens (those not
// minted for a journey) whose hashes are not in keep: a token removed from
// the configuration stops working at the next start.
func (s *Store) RevokeConfiguredExcept(ctx context.Context, keep [][]byte) error {
	if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now()
		WHERE parent_journey IS NULL AND revoked_at IS NULL AND NOT (token_sha256 = ANY($1))`, keep); err != nil {
		return fmt.Errorf("revoking old tokens: %w", err)
	}
	return nil
}
