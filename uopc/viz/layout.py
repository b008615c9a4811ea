"""A layered drawing of a DAG (Sugiyama's method), in plain Python: no Graphviz, nothing to install.

  1. layers   each node sits one layer above its highest user (a longest path to a sink), so every edge points down
  2. dummies  an edge that spans several layers passes through a dummy node in each layer between
  3. order    barycentre sweeps: each layer sorted by the mean position of its neighbours in the layer above (then
              below), the order with the fewest edge crossings kept
  4. places   x: each node pulled towards its neighbours, no two overlapping (a weighted isotonic regression per
              layer, solved by pooling adjacent violators); y: one row per layer

Everything is deterministic: the same graph gives the same coordinates, so a drawing can be compared as text.
"""
from __future__ import annotations
from dataclasses import dataclass

GAP_X, GAP_Y, DUMMY_W = 14.0, 30.0, 8.0


@dataclass
class Layout:
  layer: list[int]                               # per node (dummies after the n real nodes)
  order: list[list[int]]                         # per layer, its nodes left to right
  x: list[float]                                 # centre of each node
  y: list[float]                                 # top of each node's row
  edges: list[list[tuple[float, float]]]         # per input edge: the polyline from the source's bottom to the user
  width: float
  height: float
  crossings: int                                 # edge crossings of the order chosen (dummies included)


def layers(n: int, edges: list[tuple[int, int]]) -> list[int]:
  """Each node's layer: the longest path from it to a sink, counted from the bottom (sinks share the last layer).
  A node sits right above its highest user, so sources stay next to what reads them. Raises on a cycle."""
  users: list[list[int]] = [[] for _ in range(n)]
  indeg = [0] * n
  for s, d in edges:
    if not (0 <= s < n and 0 <= d < n): raise ValueError(f"edge {(s, d)} names a node outside 0..{n - 1}")
    users[s].append(d); indeg[d] += 1
  order, ready = [], [v for v in range(n) if indeg[v] == 0]
  while ready:   # Kahn's topological order
    v = ready.pop()
    order.append(v)
    for u in users[v]:
      indeg[u] -= 1
      if indeg[u] == 0: ready.append(u)
  if len(order) != n: raise ValueError("the graph has a cycle: a layered drawing needs a DAG")
  height = [0] * n
  for v in reversed(order): height[v] = 1 + max((height[u] for u in users[v]), default=-1)
  top = max(height, default=0)
  return [top - h for h in height]


def crossings(order: list[list[int]], down: list[list[int]]) -> int:
  """Edge crossings between every pair of adjacent layers (down[v]: v's neighbours in the next layer, with repeats)."""
  total = 0
  for upper, lower in zip(order, order[1:]):
    pos = {v: k for k, v in enumerate(lower)}
    ends = sorted((k, pos[w]) for k, v in enumerate(upper) for w in down[v])
    total += _inversions([b for _, b in ends], len(lower))
  return total


def _inversions(seq: list[int], size: int) -> int:
  """Pairs i < j with seq[i] > seq[j], by a Fenwick tree: crossings of edges sorted by their upper end."""
  tree, count = [0] * (size + 1), 0
  for k, v in enumerate(seq):
    i, below = v + 1, 0
    while i > 0: below += tree[i]; i -= i & -i   # how many earlier ends are <= v
    count += k - below
    i = v + 1
    while i <= size: tree[i] += 1; i += i & -i
  return count


def _place(order: list[int], want: list[float], width: list[float], weight: list[float]) -> list[float]:
  """Centres for one layer, left to right in `order`, as close to `want` as they can be (weighted least squares)
  while neighbours stay width/2 + GAP_X + width/2 apart. Shifting each node left by the room the ones before it
  need turns that into a non-decreasing fit, which pooling adjacent violators solves exactly."""
  shift, off = [], 0.0
  for k, v in enumerate(order):
    if k: off += (width[order[k - 1]] + width[v]) / 2 + GAP_X
    shift.append(off)
  blocks: list[list[float]] = []   # [weighted sum, weight, count]
  for k, v in enumerate(order):
    blocks.append([weight[v] * (want[v] - shift[k]), weight[v], 1])
    while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
      s, w, c = blocks.pop()
      blocks[-1][0] += s; blocks[-1][1] += w; blocks[-1][2] += c
  xs, k = [], 0
  for s, w, c in blocks:
    for _ in range(c): xs.append(s / w + shift[k]); k += 1
  return xs


def layout(sizes: list[tuple[float, float]], edges: list[tuple[int, int]], sweeps: int = 12) -> Layout:
  """Coordinates for nodes of the given (width, height) and edges (source, user), in input order. sweeps=0 keeps
  the naive order (each layer in input order), against which the sweeps are measured."""
  n = len(sizes)
  layer = layers(n, edges)
  width = [w for w, _ in sizes]
  height = [h for _, h in sizes]
  up: list[list[int]] = [[] for _ in range(n)]     # per node: neighbours in the layer above (its sources, in order)
  down: list[list[int]] = [[] for _ in range(n)]   # neighbours in the layer below (its users)
  chains = []
  for s, d in edges:   # a long edge becomes a chain through one dummy per layer it crosses
    chain = [s]
    for lay in range(layer[s] + 1, layer[d]):
      layer.append(lay); width.append(DUMMY_W); height.append(0.0); up.append([]); down.append([])
      chain.append(len(layer) - 1)
    chain.append(d)
    for a, b in zip(chain, chain[1:]): down[a].append(b); up[b].append(a)
    chains.append(chain)
  total = len(layer)
  nlayers = max(layer, default=-1) + 1
  order: list[list[int]] = [[] for _ in range(nlayers)]
  for v in range(total): order[layer[v]].append(v)   # the naive order: input order, dummies after
  order = _sweep(order, up, down, sweeps)
  x = _coordinates(order, up, down, width, n)
  tops, y = [], [0.0] * total
  top = GAP_Y / 2
  for row in order:
    tops.append(top)
    top += max((height[v] for v in row), default=0.0) + GAP_Y
  for lay, row in enumerate(order):
    rowh = max((height[v] for v in row), default=0.0)
    for v in row: y[v] = tops[lay] + (rowh - height[v]) / 2
  left = min((x[v] - width[v] / 2 for v in range(total)), default=0.0) - GAP_X
  x = [c - left for c in x]
  right = max((x[v] + width[v] / 2 for v in range(total)), default=0.0) + GAP_X
  polylines = []
  for (s, d), chain in zip(edges, chains):
    pts = [(x[s], y[s] + height[s])] + [(x[v], y[v]) for v in chain[1:-1]] + [(x[d], y[d])]
    polylines.append(pts)
  return Layout(layer[:n], order, x, y, polylines, right, top - GAP_Y / 2, crossings(order, down))


def _sweep(order: list[list[int]], up: list[list[int]], down: list[list[int]], sweeps: int) -> list[list[int]]:
  """Barycentre ordering: alternate sweeps down (sort by the sources' mean position) and up (by the users'), keeping
  the best order seen. A user's sources are weighted by their place in its source list, so source 0 drifts left."""
  best, best_x = [list(r) for r in order], crossings(order, down)
  stale = 0
  for it in range(sweeps):
    rows = range(1, len(order)) if it % 2 == 0 else range(len(order) - 2, -1, -1)
    for lay in rows:
      ref = order[lay - 1] if it % 2 == 0 else order[lay + 1]
      pos = {v: k for k, v in enumerate(ref)}
      here = {v: k for k, v in enumerate(order[lay])}
      def key(v):
        if it % 2 == 0: near = [pos[s] for s in up[v]]
        else:   # by the users below, each nudged by this node's place among that user's sources
          near = [pos[u] + 0.1 * (up[u].index(v) - (len(up[u]) - 1) / 2) / max(1, len(up[u])) for u in down[v]]
        return (sum(near) / len(near) if near else here[v], here[v])
      order[lay] = sorted(order[lay], key=key)
    c = crossings(order, down)
    if c < best_x: best, best_x, stale = [list(r) for r in order], c, 0
    else: stale += 1
    if best_x == 0 or stale >= 4: break
  return best


def _coordinates(order: list[list[int]], up: list[list[int]], down: list[list[int]], width: list[float],
                 n: int) -> list[float]:
  """x of every node: packed left to right, then each layer pulled towards its neighbours' mean, downwards and
  upwards in turn. A dummy (index n and up) weighs more, so long edges run straight."""
  x = [0.0] * len(width)
  for row in order:
    cur = 0.0
    for v in row: x[v] = cur + width[v] / 2; cur += width[v] + GAP_X
  weight = [1.0 + len(up[v]) + len(down[v]) + (4.0 if v >= n else 0.0)
            for v in range(len(width))]
  for it in range(8):
    rows = order[1:] if it % 2 == 0 else order[-2::-1]
    for row in rows:
      want = {}
      for v in row:
        near = up[v] if it % 2 == 0 else down[v]
        if not near: near = down[v] if it % 2 == 0 else up[v]
        want[v] = sum(x[w] for w in near) / len(near) if near else x[v]
      for v, c in zip(row, _place(row, want, width, weight)): x[v] = c
  return x
