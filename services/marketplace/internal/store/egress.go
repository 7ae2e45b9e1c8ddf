package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SetEgressAddr records the address of a journey's egress worker, taking it
// from any other journey that held it (a worker gone, its address reused).
func (s *Store) SetEgressAddr(ctx context.Context, uid uuid.UUID, addr string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE journeys SET egress_addr = NULL WHERE egress_addr = $2 AND uid <> $1`, uid, addr); err != nil {
			return fmt.Errorf("recording the egress address: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE journeys SET egress_addr = $2 WHERE uid = $1`, uid, addr); err != nil {
			return fmt.Errorf("recording the egress address: %w", err)
		}
		return nil
	})
}

// ClearEgressAddr forgets a journey's egress address: its worker is gone.
func (s *Store) ClearEgressAddr(ctx context.Context, uid uuid.UUID) error {
	return s.exec(ctx, `UPDATE journeys SET egress_addr = NULL WHERE uid = $1`, uid)
}

// EgressJourney is the live journey whose egress worker has addr, or
// ErrNotFound.
func (s *Store) EgressJourney(ctx context.Context, addr string) (Journey, error) {
	return scanJourney(s.pool.QueryRow(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE egress_addr = $1 AND state IN ('starting', 'active')`, addr))
}
