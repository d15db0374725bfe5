/*
 * placement.c - where chunks and parity live in a group: RAID-5 style
 * stripe rotation for xor/rs, ring and group placement for replicas.
 *
 * The stripe rule is one line (node n is member (n + s) mod N of stripe
 * s); everything else is its consequence, spelled out so the engine never
 * has to reason about it. See the figure in erasure.h.
 */
#include <errno.h>

#include "erasure_i.h"

static int layout_ok(const struct ers_layout *l)
{
	return l && l->k >= 1 && l->m >= 1 && l->nodes >= l->k + l->m;
}

int ers_layout_init(struct ers_layout *l, const struct ers_scheme *s,
		    int nodes)
{
	struct ers_scheme t;
	int rc;

	if (!l || !s) {
		ers_set_error("layout: NULL argument");
		return -EINVAL;
	}
	if (s->kind == ERS_REPLICATE) {
		ers_set_error("layout: replicate has no stripes, use "
			      "ers_replica_holders()");
		return -EINVAL;
	}
	t = *s;
	rc = ers_scheme_fit(&t, nodes);
	if (rc)
		return rc;
	l->nodes = nodes;
	l->k = t.k;
	l->m = t.m;
	return 0;
}

int ers_layout_member(const struct ers_layout *l, uint64_t stripe, int node)
{
	int u;

	if (!layout_ok(l) || node < 0 || node >= l->nodes)
		return -EINVAL;
	u = (int)(((uint64_t)node + stripe % (uint64_t)l->nodes) %
		  (uint64_t)l->nodes);
	/* A group larger than k + m: the rest sit this stripe out. */
	return u < l->k + l->m ? u : -ENOENT;
}

int ers_layout_node(const struct ers_layout *l, uint64_t stripe, int member)
{
	int n;

	if (!layout_ok(l) || member < 0 || member >= l->k + l->m)
		return -EINVAL;
	n = l->nodes;
	return (int)(((uint64_t)member + (uint64_t)n - stripe % (uint64_t)n) %
		     (uint64_t)n);
}

/*
 * Within one period of N stripes (t = stripe mod N), node n is a data
 * member where u = (n + t) mod N < k. Walking t upwards, u runs
 * n, n+1, .., N-1, 0, .., n-1: for n < k the data stripes are t = 0..k-n-1
 * (u = n..k-1) and then t = N-n..N-1 (u = 0..n-1); for n >= k they are
 * t = N-n..N-n+k-1 (u = 0..k-1). Chunk r of the period (r < k) is the r-th
 * of these.
 */
int ers_layout_locate(const struct ers_layout *l, int node, uint64_t chunk,
		      uint64_t *stripe, int *slot)
{
	uint64_t q, t;
	int n, k, r, u;

	if (!layout_ok(l) || node < 0 || node >= l->nodes || !stripe || !slot)
		return -EINVAL;
	n = l->nodes;
	k = l->k;
	q = chunk / (uint64_t)k;
	r = (int)(chunk % (uint64_t)k);
	if (node < k && r < k - node) {
		t = (uint64_t)r;
		u = node + r;
	} else if (node < k) {
		t = (uint64_t)(r + n - k);
		u = r - (k - node);
	} else {
		t = (uint64_t)(n - node + r);
		u = r;
	}
	if (q > (UINT64_MAX - t) / (uint64_t)n)
		return -ERANGE;
	*stripe = q * (uint64_t)n + t;
	*slot = u;
	return 0;
}

int ers_layout_chunk(const struct ers_layout *l, uint64_t stripe, int slot,
		     int *node, uint64_t *chunk)
{
	uint64_t q;
	int n, k, t, r, nd;

	if (!layout_ok(l) || slot < 0 || slot >= l->k || !node || !chunk)
		return -EINVAL;
	n = l->nodes;
	k = l->k;
	q = stripe / (uint64_t)n;
	t = (int)(stripe % (uint64_t)n);
	nd = ((slot - t) % n + n) % n;
	/* The rank of t among nd's data stripes, inverting locate above. */
	if (nd < k)
		r = t < k - nd ? t : t - (n - k);
	else
		r = t - (n - nd);
	*node = nd;
	*chunk = q * (uint64_t)k + (uint64_t)r;
	return 0;
}

uint64_t ers_layout_stripes(const struct ers_layout *l, int node,
			    uint64_t nchunks)
{
	uint64_t s;
	int slot;

	if (nchunks == 0 ||
	    ers_layout_locate(l, node, nchunks - 1, &s, &slot))
		return 0;
	return s + 1;
}

/*
 * The block of nodes that share copies with @node: [*base, *base + *size).
 * Ring: the whole group. Group: consecutive blocks of r, the last one
 * stretched over the N mod r spare nodes (Gemini's mixed placement); inside
 * a block ring order is used, which for a block of exactly r is "everyone
 * else in the block".
 */
static int replica_block(enum ers_replica_policy p, int nodes, int r,
			 int node, int *base, int *size)
{
	int nblocks;

	if (nodes < 1 || r < 1 || r > nodes || r - 1 > ERS_MAX_M ||
	    node < 0 || node >= nodes) {
		ers_set_error("replica: bad nodes %d, r %d or node %d", nodes,
			      r, node);
		return -EINVAL;
	}
	switch (p) {
	case ERS_REPLICA_RING:
		*base = 0;
		*size = nodes;
		return 0;
	case ERS_REPLICA_GROUP:
		nblocks = nodes / r;
		if (node < (nblocks - 1) * r) {
			*base = node / r * r;
			*size = r;
		} else {
			*base = (nblocks - 1) * r;
			*size = nodes - *base;
		}
		return 0;
	}
	ers_set_error("replica: unknown policy %d", (int)p);
	return -EINVAL;
}

static int replica_walk(enum ers_replica_policy p, int nodes, int r, int node,
			int dir, int *out)
{
	int base, size, rc;

	if (!out && r > 1)
		return -EINVAL;
	rc = replica_block(p, nodes, r, node, &base, &size);
	if (rc)
		return rc;
	for (int j = 1; j < r; j++)
		out[j - 1] = base + ((node - base + dir * j) % size + size) %
					    size;
	return 0;
}

int ers_replica_holders(enum ers_replica_policy p, int nodes, int r, int node,
			int *holders)
{
	return replica_walk(p, nodes, r, node, 1, holders);
}

int ers_replica_sources(enum ers_replica_policy p, int nodes, int r, int node,
			int *sources)
{
	return replica_walk(p, nodes, r, node, -1, sources);
}
