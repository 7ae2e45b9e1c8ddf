package console

import (
	"slices"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// An agent's tool calls follow their action, in the order they were made;
// one whose action is on another page stays where it is.
func TestAuditRowsNestToolCallsUnderTheirAction(t *testing.T) {
	page := []meshapi.AuditEntry{ // newest first, as journey_audit returns them
		{ID: 9, Type: "read"},
		{ID: 8, Type: "agent_tool", ParentID: 6},
		{ID: 7, Type: "agent_tool", ParentID: 6},
		{ID: 6, Type: "task"},
		{ID: 5, Type: "agent_tool", ParentID: 2}, // its action is on the next page
	}
	var got []int64
	var nested []bool
	for _, r := range auditRows(page) {
		got, nested = append(got, r.ID), append(nested, r.Nested)
	}
	if want := []int64{9, 6, 7, 8, 5}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if want := []bool{false, false, true, true, true}; !slices.Equal(nested, want) {
		t.Errorf("nested %v, want %v", nested, want)
	}
}
