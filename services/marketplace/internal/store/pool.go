package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PoolMember is one worker of a warm pool: created ahead of any spawn and
// owned by no journey until one claims it (ClaimPoolMember).
type PoolMember struct {
	UID            uuid.UUID
	WorkerID       string
	DefinitionHash string
	IsolationLevel string
	// Ready: its worker is created and started; else it is being created,
	// by the marketplace holding the journey lock of UID.
	Ready       bool
	ContainerID string
	Workspace   string
	// BaseCommit is the empty base its workspace is seeded with.
	BaseCommit string
	CreatedAt  time.Time
}

// ErrPoolMemberGone is returned for a pool member that another claim, or
// its removal, took first.
var ErrPoolMemberGone = errors.New("pool member claimed or removed")

// ErrPoolMemberStale is returned for a pool member made for other settings
// than the claim's: an agent without the token nested access needs. Its
// claim is rolled back; it is for removal.
var ErrPoolMemberStale = errors.New("pool member made for other settings")

// poolLock orders the reservations of pool members, which count the pool
// before they add to it.
const poolLock = `SELECT pg_advisory_xact_lock(hashtext('meshwork_pool_members'))`

// ReservePoolMember records m as being created if its pool has fewer than
// size members (creating or ready, of its worker and definition) and all
// pools together fewer than total. It reports whether it did.
func (s *Store) ReservePoolMember(ctx context.Context, m PoolMember, size, total int) (bool, error) {
	reserved := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, poolLock); err != nil {
			return fmt.Errorf("taking the pool lock: %w", err)
		}
		var mine, all int
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE worker_id = $1 AND definition_hash = $2), count(*) FROM pool_members`,
			m.WorkerID, m.DefinitionHash).Scan(&mine, &all); err != nil {
			return fmt.Errorf("counting pool members: %w", err)
		}
		if mine >= size || all >= total {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pool_members (uid, worker_id, definition_hash, isolation_level, state) VALUES ($1, $2, $3, $4, 'creating')`,
			m.UID, m.WorkerID, m.DefinitionHash, m.IsolationLevel); err != nil {
			return fmt.Errorf("reserving a pool member: %w", err)
		}
		reserved = true
		return nil
	})
	return reserved, err
}

// PoolMemberCreated records a reserved member's worker as soon as it
// exists, still creating: if its maker dies before the member is ready,
// whoever finds the row (its lock free) can remove the worker.
func (s *Store) PoolMemberCreated(ctx context.Context, uid uuid.UUID, containerID, workspace string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE pool_members SET container_id = $2, volume = $3 WHERE uid = $1 AND state = 'creating'`,
		uid, containerID, workspace)
	if err != nil {
		return fmt.Errorf("recording a pool member: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrPoolMemberGone
	}
	return nil
}

// PoolMemberReady records a reserved member's worker as created and
// started. It fails with ErrPoolMemberGone when the reservation was removed
// meanwhile (the worker is then nobody's: its maker removes it).
func (s *Store) PoolMemberReady(ctx context.Context, uid uuid.UUID, containerID, workspace, baseCommit string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE pool_members SET state = 'ready', container_id = $2, volume = $3, base_commit = $4 WHERE uid = $1 AND state = 'creating'`,
		uid, containerID, workspace, baseCommit)
	if err != nil {
		return fmt.Errorf("recording a pool member: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrPoolMemberGone
	}
	return nil
}

// poolTokenCaller is the caller of a pool member's agent token until a
// claim gives it its journey's: no journey has it, and the token is
// revoked until then.
func poolTokenCaller(uid uuid.UUID) string { return "pool/" + uid.String() }

// PutPoolToken stores the hash of the token an agent pool member carries
// for the marketplace, inactive: it authenticates nobody until
// ClaimPoolMember activates it as the claiming journey's nested caller.
func (s *Store) PutPoolToken(ctx context.Context, uid uuid.UUID, hash []byte) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO api_tokens (caller, token_sha256, parent_journey, revoked_at)
		VALUES ($3, $2, $1, now())`, uid, hash, poolTokenCaller(uid)); err != nil {
		return fmt.Errorf("storing a pool member's token: %w", err)
	}
	return nil
}

// DeletePoolMember removes a member's row, and its inactive token,
// reporting whether the row was there. The caller removes its worker.
func (s *Store) DeletePoolMember(ctx context.Context, uid uuid.UUID) (bool, error) {
	tag, err := s.pool.Exec(ctx, `WITH token AS (DELETE FROM api_tokens WHERE parent_journey = $1 AND caller = $2)
		DELETE FROM pool_members WHERE uid = $1`, uid, poolTokenCaller(uid))
	if err != nil {
		return false, fmt.Errorf("removing a pool member: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

const poolColumns = `uid, worker_id, definition_hash, isolation_level, state = 'ready', coalesce(container_id, ''), coalesce(volume, ''), coalesce(base_commit, ''), created_at`

func scanPoolMember(row pgx.Row) (PoolMember, error) {
	var m PoolMember
	err := row.Scan(&m.UID, &m.WorkerID, &m.DefinitionHash, &m.IsolationLevel, &m.Ready, &m.ContainerID, &m.Workspace, &m.BaseCommit, &m.CreatedAt)
	return m, err
}

// PoolMembers lists every pool member, oldest first.
func (s *Store) PoolMembers(ctx context.Context) ([]PoolMember, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+poolColumns+` FROM pool_members ORDER BY created_at`)
	if err != nil {
		return nil, fmt.Errorf("listing pool members: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PoolMember, error) { return scanPoolMember(r) })
}

// PoolMember returns one pool member, or ErrPoolMemberGone.
func (s *Store) PoolMember(ctx context.Context, uid uuid.UUID) (PoolMember, error) {
	m, err := scanPoolMember(s.pool.QueryRow(ctx, `SELECT `+poolColumns+` FROM pool_members WHERE uid = $1`, uid))
	if errors.Is(err, pgx.ErrNoRows) {
		return m, ErrPoolMemberGone
	}
	if err != nil {
		return m, fmt.Errorf("reading a pool member: %w", err)
	}
	return m, nil
}

// ReadyPoolMembers returns up to limit ready members of a worker's pool
// younger than maxAge, oldest first: the candidates of a claim.
func (s *Store) ReadyPoolMembers(ctx context.Context, workerID, definitionHash, isolation string, maxAge time.Duration, limit int) ([]PoolMember, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+poolColumns+` FROM pool_members
		WHERE state = 'ready' AND worker_id = $1 AND definition_hash = $2 AND isolation_level = $3
		AND created_at > now() - $4::bigint * interval '1 microsecond'
		ORDER BY created_at LIMIT $5`, workerID, definitionHash, isolation, maxAge.Microseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("listing pool members: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PoolMember, error) { return scanPoolMember(r) })
}

// ClaimPoolMember hands the ready pool member uid to a new journey j, if q
// admits one more live journey of j.Caller: in one transaction the
// member's row goes and the journey's row comes, in state starting with
// the member's uid, worker, workspace and (empty) base, and, with
// nestedToken, the member's agent token becomes the journey's nested
// caller's ("<caller>/<journey id>"). A member another claim (or its
// removal) took first fails with ErrPoolMemberGone; a journey id the
// caller has already, with ErrExists.
func (s *Store) ClaimPoolMember(ctx context.Context, uid uuid.UUID, j Journey, q Quota, nestedToken bool) (Journey, error) {
	var out Journey
	err := s.admit(ctx, j.Caller, uuid.Nil, q, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `DELETE FROM pool_members WHERE uid = $1 AND state = 'ready' RETURNING container_id, volume, base_commit`, uid).
			Scan(&j.ContainerID, &j.Workspace, &j.BaseCommit)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrPoolMemberGone
		}
		if err != nil {
			return fmt.Errorf("claiming a pool member: %w", err)
		}
		j.UID = uid
		if out, err = insertJourney(ctx, tx, j); err != nil {
			return err
		}
		if !nestedToken {
			// A token the member was made with (for nested access this
			// marketplace does not give) goes unused: it goes.
			_, err := tx.Exec(ctx, `DELETE FROM api_tokens WHERE parent_journey = $1 AND caller = $2`, uid, poolTokenCaller(uid))
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE api_tokens SET caller = $2, revoked_at = NULL WHERE parent_journey = $1 AND caller = $3`,
			uid, j.Caller+"/"+j.ID, poolTokenCaller(uid))
		if err == nil && tag.RowsAffected() != 1 {
			err = ErrPoolMemberStale // made when agents got no nested access
		}
		return err
	})
	if err != nil {
		return Journey{}, err
	}
	return out, nil
}
