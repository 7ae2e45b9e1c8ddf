package console

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// The graph's geometry, in SVG user units.
const (
	boxW, boxH   = 160, 44
	gapX, gapY   = 60, 24
	graphPadding = 10
)

// graph is a run's pipeline drawn as boxes in columns: a node's column is
// the length of the longest chain of nodes it needs, so edges go right.
type graph struct {
	Width, Height int
	Boxes         []box
	Edges         []edge
	// Loops are the edges back, from a node to the node its loop runs
	// again: curves under the boxes, dashed.
	Loops []loop
}

type loop struct {
	D     string // the SVG path
	Title string
}

type box struct {
	X, Y   int
	ID     string
	Status string
	Symbol string
	Kind   string // agent or approval
	Title  string // the tooltip
}

type edge struct{ X1, Y1, X2, Y2 int }

// layout places nodes (in the pipeline's order, needs before the nodes
// that need them).
func layout(nodes []api.NodeView) graph {
	column := map[string]int{}
	rows := map[int]int{}
	at := map[string]box{}
	var g graph
	for _, n := range nodes {
		col := 0
		for _, need := range n.Needs {
			col = max(col, column[need]+1)
		}
		column[n.ID] = col
		b := box{
			X: graphPadding + col*(boxW+gapX), Y: graphPadding + rows[col]*(boxH+gapY),
			ID: n.ID, Status: n.Status, Symbol: symbol(n.Status), Kind: n.Type,
			Title: n.ID + " (" + n.Type + "): " + n.Status,
		}
		rows[col]++
		at[n.ID] = b
		g.Boxes = append(g.Boxes, b)
		g.Width = max(g.Width, b.X+boxW+graphPadding)
		g.Height = max(g.Height, b.Y+boxH+graphPadding)
	}
	for _, n := range nodes {
		to := at[n.ID]
		for _, need := range n.Needs {
			from, ok := at[need]
			if !ok {
				continue
			}
			g.Edges = append(g.Edges, edge{X1: from.X + boxW, Y1: from.Y + boxH/2, X2: to.X, Y2: to.Y + boxH/2})
		}
	}
	for _, n := range nodes {
		from, ok1 := at[n.ID]
		to, ok2 := at[n.Next]
		if n.Next == "" || !ok1 || !ok2 {
			continue
		}
		// From the bottom of the node to the bottom of the one it goes
		// back to, dipping below both.
		x1, x2 := from.X+boxW/2, to.X+boxW/2
		y1, y2 := from.Y+boxH, to.Y+boxH
		dip := max(y1, y2) + loopDip
		g.Loops = append(g.Loops, loop{
			D:     fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", x1, y1, x1, dip, x2, dip, x2, y2),
			Title: n.ID + " goes back to " + n.Next,
		})
		g.Height = max(g.Height, dip+graphPadding)
	}
	return g
}

// loopDip is how far below the boxes a loop's curve goes.
const loopDip = 36

// symbol marks a status with a sign beside its colour and word, so that no
// state is told by colour alone.
func symbol(status string) string {
	switch status {
	case "succeeded", "allowed":
		return "✓"
	case "failed":
		return "✗"
	case "refused":
		return "⊘"
	case "running", "active":
		return "▶"
	case "stopped":
		return "■"
	case "orphaned":
		return "!"
	case "waiting":
		return "‖"
	case "skipped", "cancelled":
		return "–"
	}
	return "○"
}

// duration is how long something took, or has taken until now.
func duration(start time.Time, end *time.Time) string {
	stop := time.Now()
	if end != nil {
		stop = *end
	}
	return stop.Sub(start).Round(time.Second).String()
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
