-- The guard of a node's commit sent without an explicit transaction (see the
-- orchestrator's store.Batch.SendGuarded): it locks the run's row and checks
-- that the committer still holds the run's lease with its fencing token, that
-- the run's head is still the checkpoint the step was decided over, and that
-- the run is running or waiting. If not it raises MWS01, which aborts the
-- writes sent behind it in the same implicit transaction; the committer then
-- takes the locked path. It returns the run's thread's role sessions, role →
-- session, which a commit handing its successor over needs.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION orchestrator_lock_for_step(p_run uuid, p_owner text, p_fence bigint, p_head integer) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT thread, lease_owner, fence, head_seq, status INTO r FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND OR r.lease_owner IS DISTINCT FROM p_owner OR r.fence <> p_fence OR r.head_seq <> p_head
        OR r.status NOT IN ('running', 'waiting') THEN
        RAISE EXCEPTION 'run % moved on since the step was decided', p_run USING ERRCODE = 'MWS01';
    END IF;
    RETURN (SELECT coalesce(jsonb_object_agg(role, session_id), '{}'::jsonb) FROM role_sessions WHERE thread = r.thread);
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION orchestrator_lock_for_step(uuid, text, bigint, integer);
