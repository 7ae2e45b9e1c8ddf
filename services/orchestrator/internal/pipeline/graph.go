package pipeline

import (
	"slices"
	"strconv"
	"strings"
)

// checkGraph orders the needs graph, refuses needs cycles, unreachable nodes
// and next targets that do not loop back, and computes each node's
// ancestors. Nodes without a valid, unique id are left out of the graph
// (their problem is reported already).
func (c *compiler) checkGraph() {
	nodes := c.def.Nodes
	count := len(nodes)
	needs := make([][]int, count)      // i -> the nodes i needs
	dependents := make([][]int, count) // i -> the nodes that need i
	unknownNeed := make([]bool, count)
	for i := range nodes {
		if !c.valid[i] {
			continue
		}
		for _, id := range nodes[i].Needs {
			j, ok := c.index[id]
			if !ok {
				unknownNeed[i] = true
				continue
			}
			if !slices.Contains(needs[i], j) {
				needs[i] = append(needs[i], j)
				dependents[j] = append(dependents[j], i)
			}
		}
	}

	// Kahn's algorithm, taking the first ready node in file order.
	waiting := make([]int, count)
	var ready []int
	for i := range nodes {
		waiting[i] = len(needs[i])
		if c.valid[i] && waiting[i] == 0 && !unknownNeed[i] {
			ready = append(ready, i)
		}
	}
	c.ordered = make([]bool, count)
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		c.order = append(c.order, i)
		c.ordered[i] = true
		for _, d := range dependents[i] {
			if waiting[d]--; waiting[d] == 0 && !unknownNeed[d] {
				k, _ := slices.BinarySearch(ready, d)
				ready = slices.Insert(ready, k, d)
			}
		}
	}

	words := (count + 63) / 64
	c.ancestors = make([][]uint64, count)
	for _, i := range c.order {
		a := make([]uint64, words)
		for _, j := range needs[i] {
			for w := range a {
				a[w] |= c.ancestors[j][w]
			}
			a[j/64] |= 1 << (j % 64)
		}
		c.ancestors[i] = a
	}

	inCycle := c.reportCycles(needs)
	c.reportUnreachable(needs, dependents, unknownNeed, inCycle)
	c.checkNext()
}

// isAncestor reports whether node a is an ancestor of node i through needs.
func (c *compiler) isAncestor(a, i int) bool {
	return c.ordered[i] && c.ancestors[i][a/64]&(1<<(a%64)) != 0
}

// reportCycles finds the strongly connected components of the needs graph
// among the nodes Kahn's algorithm could not order, and reports one cycle of
// each, at the needs entry that starts it. It returns the nodes on cycles.
func (c *compiler) reportCycles(needs [][]int) []bool {
	count := len(needs)
	inCycle := make([]bool, count)
	// Tarjan's algorithm over the unordered nodes.
	idx := make([]int, count)
	low := make([]int, count)
	onStack := make([]bool, count)
	for i := range idx {
		idx[i] = -1
	}
	var stack []int
	var sccs [][]int
	next := 0
	var visit func(v int)
	visit = func(v int) {
		idx[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range needs[v] {
			if c.ordered[w] {
				continue
			}
			if idx[w] < 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], idx[w])
			}
		}
		if low[v] == idx[v] {
			var scc []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				scc = append(scc, w)
				if w == v {
					break
				}
			}
			sccs = append(sccs, scc)
		}
	}
	for i := range needs {
		if c.valid[i] && !c.ordered[i] && idx[i] < 0 {
			visit(i)
		}
	}
	for _, scc := range sccs {
		start := slices.Min(scc)
		if len(scc) == 1 && !slices.Contains(needs[start], start) {
			continue
		}
		for _, v := range scc {
			inCycle[v] = true
		}
		c.reportCycle(start, scc, needs)
	}
	return inCycle
}

// reportCycle reports the shortest needs cycle through start within its
// component.
func (c *compiler) reportCycle(start int, scc []int, needs [][]int) {
	parent := map[int]int{}
	queue := []int{start}
	found := false
	for len(queue) > 0 && !found {
		v := queue[0]
		queue = queue[1:]
		for _, w := range needs[v] {
			if !slices.Contains(scc, w) {
				continue
			}
			if w == start {
				parent[start] = v
				found = true
				break
			}
			if _, seen := parent[w]; !seen {
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	// Walk back from start to itself: start needs path[1] needs ... needs start.
	path := []int{start}
	for v := parent[start]; v != start; v = parent[v] {
		path = append(path, v)
	}
	path = append(path, start)
	slices.Reverse(path[1 : len(path)-1])
	ids := make([]string, len(path))
	for k, v := range path {
		ids[k] = c.def.Nodes[v].ID
	}
	first := slices.Index(c.def.Nodes[start].Needs, ids[1])
	c.fail(nodePath(start)+".needs["+strconv.Itoa(first)+"]", "needs cycle: %s (only next may loop, bounded by max_iterations)", strings.Join(ids, " needs "))
}

// reportUnreachable reports nodes that no root leads to through needs or
// next, other than those already reported for a cycle and those after an
// unknown need (the need is the problem).
func (c *compiler) reportUnreachable(needs, dependents [][]int, unknownNeed, inCycle []bool) {
	walk := func(from []bool, withNext bool) []bool {
		reached := slices.Clone(from)
		var queue []int
		for i, r := range reached {
			if r {
				queue = append(queue, i)
			}
		}
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			next := slices.Clone(dependents[v])
			if t, ok := c.index[c.def.Nodes[v].Next]; ok && withNext {
				next = append(next, t)
			}
			for _, w := range next {
				if !reached[w] {
					reached[w] = true
					queue = append(queue, w)
				}
			}
		}
		return reached
	}
	roots := make([]bool, len(needs))
	for i, n := range c.def.Nodes {
		roots[i] = c.valid[i] && len(n.Needs) == 0
	}
	reached := walk(roots, true)
	afterUnknown := walk(unknownNeed, false)
	for i := range needs {
		if c.valid[i] && !reached[i] && !inCycle[i] && !afterUnknown[i] {
			c.fail(nodePath(i)+".id", "node %q is unreachable: no root (a node without needs) leads to it through needs or next", c.def.Nodes[i].ID)
		}
	}
}

// checkNext refuses a next that does not loop back to the node itself or to
// one of its ancestors.
func (c *compiler) checkNext() {
	for i, n := range c.def.Nodes {
		t, ok := c.index[n.Next]
		if !ok || !c.ordered[i] || t == i || c.isAncestor(t, i) {
			continue
		}
		c.fail(nodePath(i)+".next", "node %q: next %q must be %q itself or one of its ancestors through needs: next loops back (edges forward are needs)", n.ID, n.Next, n.ID)
	}
}
