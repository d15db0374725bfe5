/*
 * test_memb.c - membership over the fake transport: everyone comes up, a
 * cut node is suspected then declared dead and learns it when it comes
 * back, a replacement is told apart, a hung node rejoins, both sides of a
 * partition, malformed heartbeats, and a seeded random schedule checked
 * against a model (MEMB_SEED=n replays one).
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "group_test.h"

#define MAXN 12
/* Small, but slack enough for a loaded 2-core machine under TSan. */
#define HB_MS 25
#define SUSPECT_MS 150
#define DEAD_MS 400
#define WAIT_MS 8000	/* the most any test waits for one thing */

struct cluster;

/* One daemon: its transport endpoint, its membership, what it was told. */
struct mnode {
	struct cluster *c;
	int id;
	bool live;
	uint64_t inc;
	struct peer_xport *x;
	struct memb *m;

	pthread_mutex_t lock;	/* protects what follows */
	uint64_t last_epoch;
	int bad_epoch, bad_view;
	int self_dead, self_up;
	uint64_t self_dead_at;	/* ms of the first self-DEAD */
	int n_suspect[MAXN], n_dead[MAXN], n_up[MAXN], n_replaced[MAXN];
	int n_back[MAXN];	/* DEAD -> UP */
	uint64_t back_at[MAXN];	/* ms of the first DEAD -> UP */
	uint64_t was_inc[MAXN];	/* of the last replacement */
	enum memb_state first[MAXN][4]; /* first changes seen, per node */
	int nfirst[MAXN];
};

struct cluster {
	struct peer_fakenet *net;
	int n;
	uint64_t next_inc;
	char addr[MAXN][32];
	const char *addrs[MAXN];
	struct mnode node[MAXN];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static uint64_t seed_from_env(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

#define WAIT_FOR(cond, ms)                                                     \
	({                                                                     \
		uint64_t end_ = now_ms() + (ms);                               \
		bool ok_;                                                      \
		while (!(ok_ = (cond)) && now_ms() < end_)                     \
			sleep_ms(5);                                           \
		ok_;                                                           \
	})

static void on_change(void *ctx, const struct memb_view *v, int node,
		      enum memb_state was, uint64_t was_inc)
{
	struct mnode *nd = ctx;
	enum memb_state st = v->node[node].state;
	struct memb_view cur;

	/* Called with no lock of memb held, on the one thread that changes
	 * the view: what memb shows now is what we were given. */
	memb_get_view(nd->m, &cur);
	pthread_mutex_lock(&nd->lock);
	if (cur.epoch != v->epoch || cur.node[node].state != st ||
	    cur.node[node].incarnation != v->node[node].incarnation)
		nd->bad_view++;
	if (v->epoch != nd->last_epoch + 1)
		nd->bad_epoch++;
	nd->last_epoch = v->epoch;
	if (node == nd->id) {
		if (st == MEMB_DEAD && nd->self_dead++ == 0)
			nd->self_dead_at = now_ms();
		if (st == MEMB_UP)
			nd->self_up++;
	} else {
		if (st == MEMB_SUSPECT)
			nd->n_suspect[node]++;
		if (st == MEMB_DEAD)
			nd->n_dead[node]++;
		if (st == MEMB_UP)
			nd->n_up[node]++;
		if (st == MEMB_UP && was == MEMB_DEAD &&
		    nd->n_back[node]++ == 0)
			nd->back_at[node] = now_ms();
		if (was_inc && was_inc != v->node[node].incarnation) {
			nd->n_replaced[node]++;
			nd->was_inc[node] = was_inc;
		}
		if (nd->nfirst[node] < 4)
			nd->first[node][nd->nfirst[node]++] = st;
	}
	pthread_mutex_unlock(&nd->lock);
}

static void node_start(struct cluster *c, int i)
{
	struct mnode *nd = &c->node[i];
	struct memb_opts o = {
		.self = i,
		.nodes = c->n,
		.addrs = c->addrs,
		.heartbeat_ms = HB_MS,
		.suspect_ms = SUSPECT_MS,
		.dead_ms = DEAD_MS,
	};

	memset(nd, 0, sizeof(*nd));
	pthread_mutex_init(&nd->lock, NULL);
	nd->c = c;
	nd->id = i;
	nd->inc = o.incarnation = c->next_inc++;
	assert_int_equal(peer_fake_new(c->net, i, nd->inc, &nd->x), 0);
	assert_int_equal(memb_new(&o, nd->x, &nd->m), 0);
	assert_int_equal(memb_listen(nd->m, on_change, nd), 0);
	assert_int_equal(peer_start(nd->x), 0);
	assert_int_equal(memb_start(nd->m), 0);
	nd->live = true;
}

static void node_stop(struct cluster *c, int i)
{
	struct mnode *nd = &c->node[i];

	if (!nd->live)
		return;
	memb_stop(nd->m);
	peer_free(nd->x);	/* no more deliveries into memb */
	memb_free(nd->m);
	pthread_mutex_destroy(&nd->lock);
	nd->live = false;
}

static struct cluster *cluster_new(int n, uint64_t seed)
{
	struct cluster *c = calloc(1, sizeof(*c));
	int i;

	assert_non_null(c);
	c->n = n;
	c->next_inc = 0x1000;
	c->net = peer_fakenet_new(n, seed);
	assert_non_null(c->net);
	peer_fakenet_delay(c->net, 0, 5);
	for (i = 0; i < n; i++) {
		snprintf(c->addr[i], sizeof(c->addr[i]), "127.0.0.1:%d",
			 7070 + i);
		c->addrs[i] = c->addr[i];
	}
	for (i = 0; i < n; i++)
		node_start(c, i);
	return c;
}

static void cluster_free(struct cluster *c)
{
	int i;

	for (i = 0; i < c->n; i++)
		node_stop(c, i);
	peer_fakenet_free(c->net);
	free(c);
}

static struct memb_node view_of(struct cluster *c, int a, int b)
{
	struct memb_view v;

	memb_get_view(c->node[a].m, &v);
	return v.node[b];
}

static bool sees(struct cluster *c, int a, int b, enum memb_state st)
{
	struct memb_node n = view_of(c, a, b);

	return n.state == st &&
	       (st != MEMB_UP || n.incarnation == c->node[b].inc);
}

static int count(struct mnode *nd, const int *p)
{
	int v;

	pthread_mutex_lock(&nd->lock);
	v = *p;
	pthread_mutex_unlock(&nd->lock);
	return v;
}

static uint64_t count64(struct mnode *nd, const uint64_t *p)
{
	uint64_t v;

	pthread_mutex_lock(&nd->lock);
	v = *p;
	pthread_mutex_unlock(&nd->lock);
	return v;
}

static bool all_up(struct cluster *c)
{
	int a, b;

	for (a = 0; a < c->n; a++)
		for (b = 0; b < c->n; b++)
			if (c->node[a].live && c->node[b].live &&
			    !sees(c, a, b, MEMB_UP))
				return false;
	return true;
}

/* What every node's callbacks must have kept true, whatever happened. */
static void check_callbacks(struct cluster *c)
{
	int i;

	for (i = 0; i < c->n; i++) {
		if (!c->node[i].live)
			continue;
		assert_int_equal(count(&c->node[i], &c->node[i].bad_view), 0);
		assert_int_equal(count(&c->node[i], &c->node[i].bad_epoch), 0);
	}
}

static void test_all_up(void **state)
{
	struct cluster *c = cluster_new(5, 1);
	struct memb_view v;
	int i;

	(void)state;
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	memb_get_view(c->node[2].m, &v);
	assert_int_equal(v.self, 2);
	assert_int_equal(v.nodes, 5);
	assert_true(v.epoch >= 4);
	for (i = 0; i < 5; i++) {
		assert_int_equal(v.node[i].id, i);
		assert_string_equal(v.node[i].addr, c->addr[i]);
		assert_int_equal(v.node[i].incarnation, c->node[i].inc);
		assert_true(v.node[i].last_heard_ms <= now_ms());
	}
	/* Heartbeats keep them up in a quiet net. */
	sleep_ms(2 * DEAD_MS);
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	/* A node's rebuild is in its heartbeats: the others see it. */
	memb_set_rebuilding(c->node[3].m, true);
	assert_true(WAIT_FOR((memb_get_view(c->node[1].m, &v),
			      v.node[3].rebuilding && !v.node[2].rebuilding),
			     WAIT_MS));
	memb_set_rebuilding(c->node[3].m, false);
	assert_true(WAIT_FOR((memb_get_view(c->node[1].m, &v),
			      !v.node[3].rebuilding),
			     WAIT_MS));
	for (i = 0; i < 5; i++)
		assert_int_equal(count(&c->node[i], &c->node[i].self_dead), 0);
	check_callbacks(c);
	cluster_free(c);
}

static void test_bad_opts(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(3, 1);
	struct peer_xport *x;
	struct memb *m = NULL;
	struct memb_opts o = {
		.self = 0, .nodes = 3, .incarnation = 1, .heartbeat_ms = 10,
		.suspect_ms = 50, .dead_ms = 100,
	};
	struct memb_opts b;

	(void)state;
	assert_int_equal(peer_fake_new(net, 0, 1, &x), 0);
	b = o;
	b.suspect_ms = 5;
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b = o;
	b.dead_ms = 50;
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b = o;
	b.incarnation = 0;
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b = o;
	b.nodes = 4;	/* not what the transport has */
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	b = o;
	b.self = 3;
	assert_int_equal(memb_new(&b, x, &m), -EINVAL);
	assert_null(m);
	assert_int_equal(memb_new(&o, x, &m), 0);
	/* Its range is taken now. */
	{
		struct memb *m2;

		assert_int_equal(memb_new(&o, x, &m2), -EEXIST);
	}
	peer_free(x);
	memb_free(m);
	memb_free(NULL);
	peer_fakenet_free(net);
}

/* A node cut from all: suspected, then dead; back after the heal. */
static void test_cut_node(void **state)
{
	struct cluster *c = cluster_new(4, 2);
	const int side[4] = { 0, 0, 0, 1 };
	int i;

	(void)state;
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	for (i = 0; i < 3; i++) {
		pthread_mutex_lock(&c->node[i].lock);
		c->node[i].nfirst[3] = 0;
		pthread_mutex_unlock(&c->node[i].lock);
	}
	peer_fakenet_partition(c->net, side);
	for (i = 0; i < 3; i++)
		assert_true(WAIT_FOR(sees(c, i, 3, MEMB_DEAD), WAIT_MS));
	assert_true(WAIT_FOR(sees(c, 3, 0, MEMB_DEAD) &&
				     sees(c, 3, 1, MEMB_DEAD) &&
				     sees(c, 3, 2, MEMB_DEAD),
			     WAIT_MS));
	for (i = 0; i < 3; i++) {
		struct mnode *nd = &c->node[i];

		/* SUSPECT before DEAD (the callback follows the view). */
		assert_true(WAIT_FOR(count(nd, &nd->nfirst[3]) == 2, WAIT_MS));
		pthread_mutex_lock(&nd->lock);
		assert_int_equal(nd->nfirst[3], 2);
		assert_int_equal(nd->first[3][0], MEMB_SUSPECT);
		assert_int_equal(nd->first[3][1], MEMB_DEAD);
		pthread_mutex_unlock(&nd->lock);
		assert_true(WAIT_FOR(sees(c, i, (i + 1) % 3, MEMB_UP),
				     WAIT_MS));
	}
	/* Cut off, it cannot know yet. */
	assert_int_equal(count(&c->node[3], &c->node[3].self_dead), 0);

	peer_fakenet_heal(c->net);
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	/* It learned it was declared dead, and is back in. */
	assert_true(WAIT_FOR(count(&c->node[3], &c->node[3].self_up) == 1,
			     WAIT_MS));
	assert_int_equal(count(&c->node[3], &c->node[3].self_dead), 1);
	assert_int_equal(view_of(c, 3, 3).state, MEMB_UP);
	/* The majority did not have to rejoin: one node lost sight of it. */
	for (i = 0; i < 3; i++) {
		assert_int_equal(count(&c->node[i], &c->node[i].self_dead), 0);
		assert_int_equal(count(&c->node[i], &c->node[i].n_replaced[3]),
				 0);
	}
	check_callbacks(c);
	cluster_free(c);
}

/*
 * A node that can reach one peer out of eleven: the sends into the black
 * holes (each would wait its whole timeout) do not starve the heartbeats
 * to the one peer it can reach.
 */
static void test_black_holes(void **state)
{
	struct cluster *c = cluster_new(12, 7);
	int i;

	(void)state;
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	for (i = 1; i < 11; i++)
		peer_fakenet_cut(c->net, 0, i, true);
	for (i = 1; i < 11; i++)
		assert_true(WAIT_FOR(sees(c, 0, i, MEMB_DEAD), WAIT_MS));
	sleep_ms(DEAD_MS);
	assert_int_equal(count(&c->node[11], &c->node[11].n_suspect[0]), 0);
	assert_int_equal(count(&c->node[0], &c->node[0].n_suspect[11]), 0);
	assert_true(sees(c, 11, 0, MEMB_UP));
	check_callbacks(c);
	cluster_free(c);
}

/* A replacement daemon (same id, new incarnation) is told apart. */
static void test_replace(void **state)
{
	struct cluster *c = cluster_new(3, 3);
	uint64_t old;
	int i;

	(void)state;
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	/* Replaced at once: never seen dead. */
	old = c->node[2].inc;
	node_stop(c, 2);
	node_start(c, 2);
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	for (i = 0; i < 2; i++) {
		assert_true(WAIT_FOR(count(&c->node[i],
					   &c->node[i].n_replaced[2]) == 1,
				     WAIT_MS));
		assert_int_equal(count64(&c->node[i], &c->node[i].was_inc[2]),
				 old);
		assert_int_equal(view_of(c, i, 2).incarnation, c->node[2].inc);
	}
	/* Replaced after it was declared dead (and must-rejoin). */
	old = c->node[2].inc;
	node_stop(c, 2);
	assert_true(WAIT_FOR(sees(c, 0, 2, MEMB_DEAD) &&
				     sees(c, 1, 2, MEMB_DEAD),
			     WAIT_MS));
	node_start(c, 2);
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	for (i = 0; i < 2; i++) {
		assert_true(WAIT_FOR(count(&c->node[i],
					   &c->node[i].n_replaced[2]) == 2,
				     WAIT_MS));
		assert_int_equal(count64(&c->node[i], &c->node[i].was_inc[2]),
				 old);
	}
	/* The demand was for the daemon it replaced, not for it. */
	sleep_ms(4 * HB_MS);
	assert_int_equal(count(&c->node[2], &c->node[2].self_dead), 0);
	check_callbacks(c);
	cluster_free(c);
}

/*
 * A hung node is declared dead; when it wakes it learns so, and the others
 * take it back only after that (never as a member that kept its state).
 */
static void test_frozen(void **state)
{
	struct cluster *c = cluster_new(4, 4);
	uint64_t dead_at;
	int i;

	(void)state;
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	peer_fakenet_freeze(c->net, 1, true);
	for (i = 0; i < 4; i++)
		if (i != 1)
			assert_true(WAIT_FOR(sees(c, i, 1, MEMB_DEAD),
					     WAIT_MS));
	/* Hung for a while longer, as a SIGSTOPped daemon past its time. */
	sleep_ms(DEAD_MS);
	peer_fakenet_freeze(c->net, 1, false);
	assert_true(WAIT_FOR(count(&c->node[1], &c->node[1].self_dead) == 1,
			     WAIT_MS));
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	assert_true(WAIT_FOR(count(&c->node[1], &c->node[1].self_up) == 1,
			     WAIT_MS));
	dead_at = count64(&c->node[1], &c->node[1].self_dead_at);
	for (i = 0; i < 4; i++) {
		if (i == 1)
			continue;
		/* Taken back once (the callback follows the view), and not
		 * before it knew. */
		assert_true(WAIT_FOR(
			count(&c->node[i], &c->node[i].n_back[1]) == 1,
			WAIT_MS));
		sleep_ms(HB_MS);
		assert_int_equal(count(&c->node[i], &c->node[i].n_back[1]), 1);
		assert_true(count64(&c->node[i], &c->node[i].back_at[1]) >=
			    dead_at);
		assert_int_equal(count(&c->node[i], &c->node[i].self_dead), 0);
	}
	assert_int_equal(count(&c->node[1], &c->node[1].self_dead), 1);
	check_callbacks(c);
	cluster_free(c);
}

/* 2|3: each side declares the other dead; the small side rejoins. */
static void test_partition(void **state)
{
	struct cluster *c = cluster_new(5, 5);
	const int side[5] = { 0, 0, 1, 1, 1 };
	int a, b;

	(void)state;
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	peer_fakenet_partition(c->net, side);
	for (a = 0; a < 5; a++)
		for (b = 0; b < 5; b++)
			if (a != b)
				assert_true(WAIT_FOR(
					sees(c, a, b,
					     side[a] == side[b] ? MEMB_UP
								: MEMB_DEAD),
					WAIT_MS));
	sleep_ms(2 * HB_MS);
	for (a = 0; a < 5; a++)
		assert_int_equal(count(&c->node[a], &c->node[a].self_dead), 0);
	peer_fakenet_heal(c->net);
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	for (a = 0; a < 2; a++)
		assert_true(WAIT_FOR(count(&c->node[a],
					   &c->node[a].self_up) == 1,
				     WAIT_MS));
	for (a = 0; a < 5; a++)
		assert_int_equal(count(&c->node[a], &c->node[a].self_dead),
				 side[a] == 0);
	check_callbacks(c);
	cluster_free(c);
}

/* Write a heartbeat as memb.c's header comment describes it. */
static uint32_t hb_make(uint8_t *b, int nodes, int sender, uint64_t inc,
			uint32_t life)
{
	uint32_t len = 32 + 16 * (uint32_t)nodes;
	int i;

	memset(b, 0, len);
	b[0] = 1;
	b[2] = (uint8_t)nodes;
	b[4] = (uint8_t)sender;
	for (i = 0; i < 8; i++)
		b[8 + i] = (uint8_t)(inc >> (8 * i));
	b[24] = (uint8_t)life;
	return len;
}

static int ignore_frame(void *ctx, int node, const struct peer_frame *f,
			void *cookie, int bulk_rc)
{
	(void)ctx;
	(void)node;
	(void)f;
	(void)cookie;
	(void)bulk_rc;
	return 0;
}

static const struct peer_rx ignore = { .deliver = ignore_frame };

/* Malformed heartbeats are refused, counted, their link closed. */
static void test_bad_frames(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(2, 6);
	struct peer_xport *x0, *raw;
	struct memb *m;
	struct memb_opts o = {
		.self = 0, .nodes = 2, .incarnation = 7, .heartbeat_ms = HB_MS,
		.suspect_ms = SUSPECT_MS, .dead_ms = DEAD_MS,
	};
	uint8_t b[32 + 16 * 2 + 8];
	struct peer_frame f = { .type = PEER_T_MEMB_FIRST, .meta = b };
	struct peer_stats st;
	uint64_t bad = 0;
	struct memb_view v;

	(void)state;
	assert_int_equal(peer_fake_new(net, 0, 7, &x0), 0);
	assert_int_equal(memb_new(&o, x0, &m), 0);
	assert_int_equal(peer_start(x0), 0);
	assert_int_equal(memb_start(m), 0);
	assert_int_equal(peer_fake_new(net, 1, 9, &raw), 0);
	/* It takes node 0's heartbeats and ignores them. */
	assert_int_equal(peer_register(raw, PEER_T_MEMB_FIRST,
				       PEER_T_MEMB_LAST, &ignore),
			 0);
	assert_int_equal(peer_start(raw), 0);

#define SEND_BAD()                                                             \
	do {                                                                   \
		assert_int_equal(peer_send(raw, 0, &f, 1000), 0);              \
		bad++;                                                         \
		assert_true(WAIT_FOR((peer_stats(x0, 1, &st),                  \
				      st.bad_frames == bad),                   \
				     WAIT_MS));                                \
	} while (0)

	f.meta_len = hb_make(b, 2, 1, 9, 0) + 1;	/* too long */
	SEND_BAD();
	f.meta_len = hb_make(b, 2, 1, 9, 0);
	b[0] = 2;					/* version */
	SEND_BAD();
	hb_make(b, 2, 0, 9, 0);				/* not the sender */
	SEND_BAD();
	hb_make(b, 2, 1, 0, 0);				/* no incarnation */
	SEND_BAD();
	hb_make(b, 2, 1, 9, 0);
	b[32 + 16 + 12] = 4;				/* no such state */
	SEND_BAD();
	hb_make(b, 2, 1, 9, 0);
	b[32 + 13] = 0x80;				/* unknown flag */
	SEND_BAD();
	hb_make(b, 2, 1, 9, 0);
	b[28] = 0x2;					/* unknown header flag */
	SEND_BAD();
	hb_make(b, 2, 1, 9, 0);
	f.type = PEER_T_MEMB_FIRST + 1;			/* not ours (yet) */
	SEND_BAD();
	f.type = PEER_T_MEMB_FIRST;
	f.bulk = b;					/* bulk */
	f.bulk_len = 4;
	SEND_BAD();
	f.bulk = NULL;
	f.bulk_len = 0;
	memb_get_view(m, &v);
	assert_int_equal(v.node[1].state, MEMB_UNKNOWN);
	peer_stats(x0, 1, &st);
	assert_int_equal(st.frames_in, bad);

	/* The same bytes, well formed, are a heartbeat. */
	assert_int_equal(peer_send(raw, 0, &f, 1000), 0);
	assert_true(WAIT_FOR((memb_get_view(m, &v),
			      v.node[1].state == MEMB_UP &&
				      v.node[1].incarnation == 9),
			     WAIT_MS));
	assert_false(v.node[1].rebuilding);
	/* HB_F_REBUILDING: the sender is bringing its files back. */
	b[28] = 0x1;
	assert_int_equal(peer_send(raw, 0, &f, 1000), 0);
	assert_true(WAIT_FOR((memb_get_view(m, &v), v.node[1].rebuilding),
			     WAIT_MS));
	b[28] = 0;
	assert_int_equal(peer_send(raw, 0, &f, 1000), 0);
	assert_true(WAIT_FOR((memb_get_view(m, &v), !v.node[1].rebuilding),
			     WAIT_MS));
	/* Its view says node 0 (inc 7, life 0) is dead, must rejoin. */
	b[32 + 12] = MEMB_DEAD;
	b[32 + 13] = 1;
	b[32] = 7;
	assert_int_equal(peer_send(raw, 0, &f, 1000), 0);
	assert_true(WAIT_FOR((memb_get_view(m, &v),
			      v.node[0].state == MEMB_DEAD),
			     WAIT_MS));
	/* Same life again: nothing new.  Up with the new life: back. */
	b[32 + 12] = MEMB_UP;
	b[32 + 13] = 0;
	b[32 + 8] = 1;
	assert_int_equal(peer_send(raw, 0, &f, 1000), 0);
	assert_true(WAIT_FOR((memb_get_view(m, &v),
			      v.node[0].state == MEMB_UP),
			     WAIT_MS));
	memb_stop(m);
	peer_free(raw);
	peer_free(x0);
	memb_free(m);
	peer_fakenet_free(net);
#undef SEND_BAD
}

/* A peer played by the test: it sends what we write, keeps what it gets. */
struct raw {
	struct peer_xport *x;
	pthread_mutex_t lock;
	uint8_t last[MAXN][32 + 16 * MAXN];	/* heartbeats, per sender */
	uint32_t last_len[MAXN];
};

static int raw_deliver(void *ctx, int node, const struct peer_frame *f,
		       void *cookie, int bulk_rc)
{
	struct raw *r = ctx;

	(void)cookie;
	(void)bulk_rc;
	if (f->meta_len > sizeof(r->last[0]) || node >= MAXN)
		return 0;
	pthread_mutex_lock(&r->lock);
	memcpy(r->last[node], f->meta, f->meta_len);
	r->last_len[node] = f->meta_len;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

/* Byte @off of node @from's last heartbeat's entry for @node. */
static int raw_entry(struct raw *r, int from, int node, int off)
{
	int v = -1;

	pthread_mutex_lock(&r->lock);
	if (r->last_len[from])
		v = r->last[from][32 + 16 * node + off];
	pthread_mutex_unlock(&r->lock);
	return v;
}

/* Send heartbeats as node @self (inc 9, @life) to nodes 0..n-2 for @ms. */
static void raw_beat(struct raw *r, int n, int self, uint32_t life, int ms)
{
	uint8_t b[32 + 16 * MAXN];
	struct peer_frame f = { .type = PEER_T_MEMB_FIRST, .meta = b };
	uint64_t end = now_ms() + (uint64_t)ms;
	int i;

	f.meta_len = hb_make(b, n, self, 9, life);
	do {
		for (i = 0; i < n; i++)
			if (i != self)
				peer_send(r->x, i, &f, HB_MS);
		sleep_ms(HB_MS);
	} while (now_ms() < end);
}

/*
 * The rejoin rule on the wire: a peer declared dead (by nodes that hear
 * half the group) stays dead, however long it keeps sending, until its
 * heartbeats carry a higher life; the demand it must answer is in the
 * others' heartbeats.
 */
static void test_rejoin_rule(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(3, 8);
	struct mnode nd[2];
	struct raw r;
	struct peer_rx rx = { .ctx = &r, .deliver = raw_deliver };
	struct memb_opts o = {
		.nodes = 3, .heartbeat_ms = HB_MS, .suspect_ms = SUSPECT_MS,
		.dead_ms = DEAD_MS,
	};
	struct memb_view v;
	int i;

	(void)state;
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.lock, NULL);
	for (i = 0; i < 2; i++) {
		memset(&nd[i], 0, sizeof(nd[i]));
		pthread_mutex_init(&nd[i].lock, NULL);
		nd[i].id = o.self = i;
		nd[i].inc = o.incarnation = 7 + (uint64_t)i;
		assert_int_equal(peer_fake_new(net, i, nd[i].inc, &nd[i].x), 0);
		assert_int_equal(memb_new(&o, nd[i].x, &nd[i].m), 0);
		assert_int_equal(memb_listen(nd[i].m, on_change, &nd[i]), 0);
		assert_int_equal(peer_start(nd[i].x), 0);
		assert_int_equal(memb_start(nd[i].m), 0);
	}
	assert_int_equal(peer_fake_new(net, 2, 9, &r.x), 0);
	assert_int_equal(peer_register(r.x, PEER_T_MEMB_FIRST,
				       PEER_T_MEMB_LAST, &rx),
			 0);
	assert_int_equal(peer_start(r.x), 0);

	raw_beat(&r, 3, 2, 0, 4 * HB_MS);
	for (i = 0; i < 2; i++)
		assert_true(WAIT_FOR((memb_get_view(nd[i].m, &v),
				      v.node[2].state == MEMB_UP),
				     WAIT_MS));
	/* Silent: declared dead, and told to rejoin. */
	for (i = 0; i < 2; i++)
		assert_true(WAIT_FOR((memb_get_view(nd[i].m, &v),
				      v.node[2].state == MEMB_DEAD),
				     WAIT_MS));
	raw_beat(&r, 3, 2, 0, 2 * HB_MS);
	for (i = 0; i < 2; i++) {
		assert_int_equal(raw_entry(&r, i, 2, 12), MEMB_DEAD);
		assert_int_equal(raw_entry(&r, i, 2, 13), 1);	/* demand */
		assert_int_equal(raw_entry(&r, i, 2, 8), 0);	/* life 0 */
	}
	/* Awake again but with the same life: still dead. */
	raw_beat(&r, 3, 2, 0, DEAD_MS);
	for (i = 0; i < 2; i++) {
		memb_get_view(nd[i].m, &v);
		assert_int_equal(v.node[2].state, MEMB_DEAD);
	}
	/* Rejoined: taken back, and they say so. */
	raw_beat(&r, 3, 2, 1, 4 * HB_MS);
	for (i = 0; i < 2; i++) {
		assert_true(WAIT_FOR((memb_get_view(nd[i].m, &v),
				      v.node[2].state == MEMB_UP),
				     WAIT_MS));
		assert_true(WAIT_FOR(raw_entry(&r, i, 2, 12) == MEMB_UP &&
					     raw_entry(&r, i, 2, 8) == 1 &&
					     raw_entry(&r, i, 2, 13) == 0,
				     WAIT_MS));
		assert_int_equal(count(&nd[i], &nd[i].n_back[2]), 1);
	}
	for (i = 0; i < 2; i++)
		memb_stop(nd[i].m);
	for (i = 0; i < 2; i++) {
		peer_free(nd[i].x);
		memb_free(nd[i].m);
		pthread_mutex_destroy(&nd[i].lock);
	}
	peer_free(r.x);
	pthread_mutex_destroy(&r.lock);
	peer_fakenet_free(net);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The model of the random test: which pairs can hear each other. */
struct model {
	bool cut[MAXN][MAXN];
	bool frozen[MAXN];
};

static bool connected(const struct cluster *c, const struct model *md,
		      int a, int b)
{
	return c->node[a].live && c->node[b].live && !md->cut[a][b] &&
	       !md->frozen[a] && !md->frozen[b];
}

/*
 * Once the net has been quiet for dead_ms: live connected nodes see each
 * other UP with the right incarnation; a node sees a node it cannot hear
 * as DEAD (or never heard of it); a node with a peer to talk to is UP in
 * its own eyes.  Prints the first difference when @say.
 */
static bool model_holds(struct cluster *c, const struct model *md, bool say)
{
	struct memb_node n;
	int a, b;
	bool peer;

	for (a = 0; a < c->n; a++) {
		if (!c->node[a].live)
			continue;
		peer = false;
		for (b = 0; b < c->n; b++) {
			if (a == b)
				continue;
			n = view_of(c, a, b);
			if (connected(c, md, a, b)) {
				peer = true;
				if (n.state == MEMB_UP &&
				    n.incarnation == c->node[b].inc)
					continue;
			} else if (n.state == MEMB_DEAD ||
				   n.state == MEMB_UNKNOWN) {
				continue;
			}
			if (say)
				print_message("model: %d sees %d %s inc "
					      "%" PRIx64 " (live %d inc "
					      "%" PRIx64 ", connected %d)\n",
					      a, b, memb_state_name(n.state),
					      n.incarnation, c->node[b].live,
					      c->node[b].inc,
					      connected(c, md, a, b));
			return false;
		}
		n = view_of(c, a, a);
		if (peer && n.state != MEMB_UP) {
			if (say)
				print_message("model: %d sees itself %s\n", a,
					      memb_state_name(n.state));
			return false;
		}
	}
	return true;
}

static void model_check(struct cluster *c, const struct model *md,
			uint64_t seed, int step)
{
	if (WAIT_FOR(model_holds(c, md, false), DEAD_MS * 4 + WAIT_MS))
		return;
	model_holds(c, md, true);
	fail_msg("model differs after step %d (MEMB_SEED=%" PRIu64 ")", step,
		 seed);
}

/*
 * Random cuts, heals, partitions, freezes, crashes and replacements, each
 * step checked against the model once the net is quiet.
 */
static void test_random(void **state)
{
	uint64_t seed = seed_from_env("MEMB_SEED", 1), r = seed;
	enum { N = 5, STEPS = 10 };
	struct cluster *c = cluster_new(N, seed);
	struct model md = { { { false } }, { false } };
	int step, a, b, op, side[N];

	(void)state;
	print_message("random schedule: MEMB_SEED=%" PRIu64 "\n", seed);
	assert_true(WAIT_FOR(all_up(c), WAIT_MS));
	for (step = 0; step < STEPS; step++) {
		a = (int)(splitmix(&r) % N);
		b = (int)(splitmix(&r) % (N - 1));
		b += b >= a;
		op = (int)(splitmix(&r) % 7);
		switch (op) {
		case 0:	/* cut one link */
			peer_fakenet_cut(c->net, a, b, true);
			md.cut[a][b] = md.cut[b][a] = true;
			print_message("step %d: cut %d-%d\n", step, a, b);
			break;
		case 1:	/* heal one link */
			peer_fakenet_cut(c->net, a, b, false);
			md.cut[a][b] = md.cut[b][a] = false;
			print_message("step %d: heal %d-%d\n", step, a, b);
			break;
		case 2:	/* a random partition */
			for (a = 0; a < N; a++)
				side[a] = (int)(splitmix(&r) % 2);
			peer_fakenet_partition(c->net, side);
			for (a = 0; a < N; a++)
				for (b = 0; b < N; b++)
					if (side[a] != side[b])
						md.cut[a][b] = true;
			print_message("step %d: partition %d%d%d%d%d\n", step,
				      side[0], side[1], side[2], side[3],
				      side[4]);
			break;
		case 3:	/* heal everything */
			peer_fakenet_heal(c->net);
			memset(md.cut, 0, sizeof(md.cut));
			print_message("step %d: heal all\n", step);
			break;
		case 4:	/* (un)freeze */
			md.frozen[a] = !md.frozen[a];
			peer_fakenet_freeze(c->net, a, md.frozen[a]);
			print_message("step %d: %s %d\n", step,
				      md.frozen[a] ? "freeze" : "thaw", a);
			break;
		case 5:	/* crash */
			node_stop(c, a);
			print_message("step %d: crash %d\n", step, a);
			break;
		case 6:	/* replace (or restart a crashed one) */
			node_stop(c, a);
			node_start(c, a);
			print_message("step %d: replace %d\n", step, a);
			break;
		}
		if (splitmix(&r) % 2)
			model_check(c, &md, seed, step);
		else
			sleep_ms((int)(splitmix(&r) % DEAD_MS));
	}
	/* Heal, thaw and restart everything: all up, all agree. */
	peer_fakenet_heal(c->net);
	memset(md.cut, 0, sizeof(md.cut));
	for (a = 0; a < N; a++) {
		md.frozen[a] = false;
		peer_fakenet_freeze(c->net, a, false);
		if (!c->node[a].live)
			node_start(c, a);
	}
	model_check(c, &md, seed, STEPS);
	assert_true(all_up(c));
	check_callbacks(c);
	cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_up),
		cmocka_unit_test(test_bad_opts),
		cmocka_unit_test(test_cut_node),
		cmocka_unit_test(test_black_holes),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_frozen),
		cmocka_unit_test(test_partition),
		cmocka_unit_test(test_bad_frames),
		cmocka_unit_test(test_rejoin_rule),
		cmocka_unit_test(test_random),
	};

	printf("MEMB_SEED=%" PRIu64 "\n", seed_from_env("MEMB_SEED", 1));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
