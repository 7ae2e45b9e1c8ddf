-- An agent's own tool calls, checked by the gate inside its worker, are
-- audited as rows of their own under the execute_in_worker action they
-- happened in (action_type 'agent_tool', target the call's summary).

-- +goose Up
ALTER TABLE actions ADD COLUMN parent_action_id bigint REFERENCES actions (id);
CREATE INDEX actions_parent_idx ON actions (parent_action_id) WHERE parent_action_id IS NOT NULL;

-- +goose Down
DROP INDEX actions_parent_idx;
ALTER TABLE actions DROP COLUMN parent_action_id;
