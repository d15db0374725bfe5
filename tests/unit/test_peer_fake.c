/*
 * test_peer_fake.c - the fake transport: order per pair under random
 * delays, calls with bulk into the caller's buffer, timeouts, links cut
 * during calls and during a bulk, partitions and heals, frozen nodes,
 * random drops, replaced endpoints, refused frames, and a seeded random
 * schedule (PEER_FAKE_SEED=n replays one).
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
#include <unistd.h>

#include <cmocka.h>

#include "erasure.h"
#include "group_test.h"

#define MAXN 6

enum {
	T_SEQ = PEER_T_TEST_FIRST,	/* meta: u64 seq */
	T_ECHO,		/* meta: u32 bulk_len, u32 pattern; answered */
	T_SILENT,	/* a request never answered */
	T_BULK,		/* bulk into the module's own buffer */
	T_BAD,		/* refused with -EPROTO */
	T_LAST = T_BAD,
};

/* One endpoint and what its module saw. */
struct tnode {
	struct peer_xport *x;
	struct peer_fakenet *net;
	int id;
	pthread_mutex_t lock;
	uint64_t last_seq[MAXN];	/* of T_SEQ frames, per sender */
	uint64_t got[MAXN];
	int order_errors;
	int ups[MAXN], downs[MAXN];
	uint64_t up_inc[MAXN];
	bool link_up[MAXN];
	/* T_BULK */
	uint8_t bulk_buf[4096];
	int bulk_dests, bulk_ok, bulk_reset, bulk_bad_cookie;
	bool cut_in_bulk_dest;		/* cut the link from bulk_dest */
	int cut_peer;
	/* T_ECHO requests answered; T_SILENT seen */
	int echoes, silents;
	/* T_SEQ deliveries wait while hold_seq: this endpoint hears late */
	bool hold_seq, held;
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

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint8_t pattern_byte(uint32_t pattern, uint32_t i)
{
	return (uint8_t)(pattern * 131u + i * 7u + (i >> 8));
}

static void *t_bulk_dest(void *ctx, int node, const struct peer_frame *f,
			 void **cookie)
{
	struct tnode *t = ctx;
	void *dst = NULL;

	if (f->type != T_BULK || f->bulk_len > sizeof(t->bulk_buf))
		return NULL;
	pthread_mutex_lock(&t->lock);
	t->bulk_dests++;
	dst = t->bulk_buf;
	*cookie = t;
	pthread_mutex_unlock(&t->lock);
	/* Deterministic: the link dies while the bulk is on its way. */
	if (t->cut_in_bulk_dest)
		peer_fakenet_cut(t->net, t->id, node, true);
	return dst;
}

static int t_deliver(void *ctx, int node, const struct peer_frame *f,
		     void *cookie, int bulk_rc)
{
	struct tnode *t = ctx;
	uint8_t meta[8];
	uint32_t len, pattern;
	uint8_t *bulk;
	uint64_t seq;
	int rc;

	switch (f->type) {
	case T_SEQ:
		if (f->meta_len != 8)
			return -EPROTO;
		seq = get_u64(f->meta);
		pthread_mutex_lock(&t->lock);
		if (seq <= t->last_seq[node])
			t->order_errors++;
		t->last_seq[node] = seq;
		t->got[node]++;
		t->held = t->hold_seq;
		while (t->hold_seq) {
			pthread_mutex_unlock(&t->lock);
			sleep_ms(1);
			pthread_mutex_lock(&t->lock);
		}
		pthread_mutex_unlock(&t->lock);
		return 0;
	case T_ECHO: {
		struct peer_frame rep = { .type = T_ECHO };

		if (f->meta_len != 8)
			return -EPROTO;
		memcpy(&len, f->meta, 4);
		memcpy(&pattern, (const uint8_t *)f->meta + 4, 4);
		bulk = malloc(len ? len : 1);
		if (!bulk)
			return 0;
		for (uint32_t i = 0; i < len; i++)
			bulk[i] = pattern_byte(pattern, i);
		memcpy(meta, f->meta, 8);
		rep.meta = meta;
		rep.meta_len = 8;
		rep.bulk = bulk;
		rep.bulk_len = len;
		rep.bulk_crc = ers_crc32c(0, bulk, len);
		rc = peer_reply(t->x, node, f, &rep, 1000);
		free(bulk);
		pthread_mutex_lock(&t->lock);
		t->echoes += rc == 0;
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	case T_SILENT:
		pthread_mutex_lock(&t->lock);
		t->silents++;
		pthread_mutex_unlock(&t->lock);
		return 0;
	case T_BULK:
		pthread_mutex_lock(&t->lock);
		if (cookie != t)
			t->bulk_bad_cookie++;
		if (bulk_rc == -ECONNRESET) {
			t->bulk_reset++;
		} else if (bulk_rc == 0 && f->bulk == t->bulk_buf &&
			   ers_crc32c(0, f->bulk, f->bulk_len) == f->bulk_crc) {
			t->bulk_ok++;
		}
		pthread_mutex_unlock(&t->lock);
		return 0;
	default:
		return -EPROTO;
	}
}

static void t_link(void *ctx, int node, uint64_t inc, bool up)
{
	struct tnode *t = ctx;

	pthread_mutex_lock(&t->lock);
	if (up) {
		t->ups[node]++;
		t->up_inc[node] = inc;
	} else {
		t->downs[node]++;
	}
	t->link_up[node] = up;
	pthread_mutex_unlock(&t->lock);
}

static void node_make(struct peer_fakenet *net, struct tnode *t, int id,
		      uint64_t inc)
{
	struct peer_rx rx = {
		.ctx = t,
		.bulk_dest = t_bulk_dest,
		.deliver = t_deliver,
		.link = t_link,
	};

	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->net = net;
	t->id = id;
	assert_int_equal(peer_fake_new(net, id, inc, &t->x), 0);
	assert_int_equal(peer_register(t->x, T_SEQ, T_LAST, &rx), 0);
	assert_int_equal(peer_start(t->x), 0);
}

static void node_free(struct tnode *t)
{
	peer_free(t->x);
	t->x = NULL;
	pthread_mutex_destroy(&t->lock);
}

static int send_seq(struct tnode *t, int to, uint64_t seq, int timeout_ms)
{
	uint8_t meta[8];
	struct peer_frame f = {
		.type = T_SEQ, .meta = meta, .meta_len = sizeof(meta),
	};

	put_u64(meta, seq);
	return peer_send(t->x, to, &f, timeout_ms);
}

static uint64_t got(struct tnode *t, int from)
{
	uint64_t n;

	pthread_mutex_lock(&t->lock);
	n = t->got[from];
	pthread_mutex_unlock(&t->lock);
	return n;
}

static uint64_t last(struct tnode *t, int from)
{
	uint64_t n;

	pthread_mutex_lock(&t->lock);
	n = t->last_seq[from];
	pthread_mutex_unlock(&t->lock);
	return n;
}

/* A send on a thread of its own, for sends that wait. */
struct bg_send {
	pthread_t th;
	struct tnode *t;
	int to;
	uint64_t seq;
	int timeout_ms;
	int rc;
};

static void *bg_send_fn(void *arg)
{
	struct bg_send *c = arg;

	c->rc = send_seq(c->t, c->to, c->seq, c->timeout_ms);
	return NULL;
}

static void bg_send_start(struct bg_send *c)
{
	assert_int_equal(pthread_create(&c->th, NULL, bg_send_fn, c), 0);
}

static uint64_t read_u64(struct tnode *t, const uint64_t *p)
{
	uint64_t v;

	pthread_mutex_lock(&t->lock);
	v = *p;
	pthread_mutex_unlock(&t->lock);
	return v;
}

static int read_int(struct tnode *t, const int *p)
{
	int v;

	pthread_mutex_lock(&t->lock);
	v = *p;
	pthread_mutex_unlock(&t->lock);
	return v;
}

static bool read_bool(struct tnode *t, const bool *p)
{
	bool v;

	pthread_mutex_lock(&t->lock);
	v = *p;
	pthread_mutex_unlock(&t->lock);
	return v;
}

/* Poll @cond for up to @ms; true once it held. */
#define WAIT_FOR(cond, ms)                                                     \
	({                                                                     \
		uint64_t end_ = now_ms() + (ms);                               \
		bool ok_;                                                      \
		while (!(ok_ = (cond)) && now_ms() < end_)                     \
			sleep_ms(2);                                           \
		ok_;                                                           \
	})

/* Frames from A to B keep their order under random delays. */
static void test_order(void **state)
{
	uint64_t seed = seed_from_env("PEER_FAKE_SEED", 1);
	struct peer_fakenet *net = peer_fakenet_new(3, seed);
	struct tnode t[3];
	const int n = 300;
	struct peer_stats st;
	int i;

	(void)state;
	peer_fakenet_delay(net, 0, 15);
	for (i = 0; i < 3; i++)
		node_make(net, &t[i], i, 100 + (uint64_t)i);
	for (i = 1; i <= n; i++) {
		assert_int_equal(send_seq(&t[0], 1, (uint64_t)i, 1000), 0);
		assert_int_equal(send_seq(&t[2], 1, (uint64_t)i, 1000), 0);
		assert_int_equal(send_seq(&t[1], 0, (uint64_t)i, 1000), 0);
	}
	assert_true(WAIT_FOR(got(&t[1], 0) == n && got(&t[1], 2) == n &&
				     got(&t[0], 1) == n,
			     10000));
	assert_int_equal(read_int(&t[1], &t[1].order_errors), 0);
	assert_int_equal(read_int(&t[0], &t[0].order_errors), 0);
	assert_int_equal(last(&t[1], 0), n);
	/* One link per pair, up once, with the peer's incarnation. */
	assert_int_equal(read_int(&t[1], &t[1].ups[0]), 1);
	assert_int_equal(read_int(&t[0], &t[0].ups[1]), 1);
	assert_int_equal(read_u64(&t[1], &t[1].up_inc[2]), 102);
	assert_int_equal(read_u64(&t[0], &t[0].up_inc[1]), 101);
	assert_int_equal(read_int(&t[1], &t[1].downs[0]), 0);
	peer_stats(t[1].x, 0, &st);
	assert_int_equal(st.frames_in, n);
	assert_int_equal(st.frames_out, n);
	assert_true(st.up);
	assert_int_equal(st.incarnation, 100);
	/* Nothing to self, nothing out of range. */
	assert_int_equal(send_seq(&t[0], 0, 1, 10), -EINVAL);
	assert_int_equal(send_seq(&t[0], 3, 1, 10), -EINVAL);
	for (i = 0; i < 3; i++)
		node_free(&t[i]);
	peer_fakenet_free(net);
}

static int echo_call(struct tnode *t, int to, uint32_t len, uint32_t pattern,
		     uint8_t *buf, uint32_t cap, int timeout_ms,
		     struct peer_reply *rep)
{
	uint8_t meta[8], rmeta[16];
	struct peer_frame req = {
		.type = T_ECHO, .meta = meta, .meta_len = sizeof(meta),
	};

	memcpy(meta, &len, 4);
	memcpy(meta + 4, &pattern, 4);
	memset(rep, 0, sizeof(*rep));
	rep->meta = rmeta;
	rep->meta_cap = sizeof(rmeta);
	rep->bulk = buf;
	rep->bulk_cap = cap;
	return peer_call(t->x, to, &req, rep, timeout_ms);
}

/* Calls: the reply's bulk lands in the caller's buffer; timeouts. */
static void test_calls(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(2, 7);
	struct tnode t[2];
	struct peer_reply rep;
	struct peer_stats st;
	uint32_t len = 100000;
	uint8_t *buf = malloc(len);
	uint64_t t0;
	uint32_t i;
	int rc;

	(void)state;
	assert_non_null(buf);
	peer_fakenet_delay(net, 1, 5);
	node_make(net, &t[0], 0, 1);
	node_make(net, &t[1], 1, 2);

	assert_int_equal(echo_call(&t[0], 1, len, 3, buf, len, 2000, &rep), 0);
	assert_int_equal(rep.bulk_len, len);
	assert_int_equal(rep.meta_len, 8);
	assert_int_equal(rep.type, T_ECHO);
	assert_int_equal(rep.bulk_crc, ers_crc32c(0, buf, len));
	for (i = 0; i < len; i++)
		if (buf[i] != pattern_byte(3, i))
			break;
	assert_int_equal(i, len);
	/* A reply too big for the caller's buffer. */
	assert_int_equal(echo_call(&t[0], 1, len, 4, buf, len / 2, 2000, &rep),
			 -EMSGSIZE);
	/* Both ways. */
	assert_int_equal(echo_call(&t[1], 0, 10, 5, buf, len, 2000, &rep), 0);
	assert_int_equal(buf[9], pattern_byte(5, 9));

	/* No answer: -ETIMEDOUT after about the timeout, counted. */
	{
		struct peer_frame req = { .type = T_SILENT };
		uint8_t m[8];
		struct peer_reply r = { .meta = m, .meta_cap = 8 };

		t0 = now_ms();
		rc = peer_call(t[0].x, 1, &req, &r, 150);
		assert_int_equal(rc, -ETIMEDOUT);
		assert_true(now_ms() - t0 >= 140);
		peer_stats(t[0].x, 1, &st);
		assert_int_equal(st.call_timeouts, 1);
		assert_int_equal(read_int(&t[1], &t[1].silents), 1);
	}
	/* A node with no endpoint refuses at once. */
	node_free(&t[1]);
	t0 = now_ms();
	assert_int_equal(echo_call(&t[0], 1, 1, 1, buf, len, 5000, &rep),
			 -ENOTCONN);
	assert_true(now_ms() - t0 < 4000);
	node_free(&t[0]);
	peer_fakenet_free(net);
	free(buf);
}

/* A call on a thread of its own, so that the test can cut under it. */
struct bg_call {
	pthread_t th;
	struct tnode *t;
	int to;
	uint16_t type;
	uint32_t len;
	uint8_t *buf;
	uint32_t cap;
	int timeout_ms;
	int rc;
};

static void *bg_call_fn(void *arg)
{
	struct bg_call *c = arg;
	struct peer_reply rep;

	if (c->type == T_ECHO) {
		c->rc = echo_call(c->t, c->to, c->len, 9, c->buf, c->cap,
				  c->timeout_ms, &rep);
	} else {
		struct peer_frame req = { .type = c->type };
		struct peer_reply r = { 0 };

		c->rc = peer_call(c->t->x, c->to, &req, &r, c->timeout_ms);
	}
	return NULL;
}

static void bg_start(struct bg_call *c)
{
	assert_int_equal(pthread_create(&c->th, NULL, bg_call_fn, c), 0);
}

static void bg_join(struct bg_call *c)
{
	assert_int_equal(pthread_join(c->th, NULL), 0);
}

/* A cut during a call fails it -ECONNRESET, before or during its bulk. */
static void test_cut_during_call(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(2, 11);
	struct tnode t[2];
	uint8_t buf[4096], data[4096];
	struct bg_call c;
	uint64_t t0;
	uint32_t i;

	(void)state;
	node_make(net, &t[0], 0, 1);
	node_make(net, &t[1], 1, 2);

	/* A request never answered: the cut ends the wait at once. */
	c = (struct bg_call){ .t = &t[0], .to = 1, .type = T_SILENT,
			      .timeout_ms = 20000 };
	t0 = now_ms();
	bg_start(&c);
	assert_true(WAIT_FOR(read_int(&t[1], &t[1].silents) == 1, 5000));
	peer_fakenet_cut(net, 0, 1, true);
	bg_join(&c);
	assert_int_equal(c.rc, -ECONNRESET);
	assert_true(now_ms() - t0 < 10000);
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].downs[1]) == 1 &&
				     read_int(&t[1], &t[1].downs[0]) == 1,
			     5000));
	/* A cut link is a black hole: -ENOTCONN once the timeout is over. */
	t0 = now_ms();
	assert_int_equal(send_seq(&t[0], 1, 1, 100), -ENOTCONN);
	assert_true(now_ms() - t0 >= 90);
	peer_fakenet_cut(net, 0, 1, false);

	/*
	 * The reply's meta is 1000 ms on its way and its bulk 500 ms more: a
	 * cut 200 ms after the server answered lands before the meta or
	 * inside the bulk (on a very slow machine); -ECONNRESET either way.
	 */
	peer_fakenet_delay(net, 1000, 1000);
	c = (struct bg_call){ .t = &t[0], .to = 1, .type = T_ECHO,
			      .len = sizeof(buf), .buf = buf,
			      .cap = sizeof(buf), .timeout_ms = 20000 };
	bg_start(&c);
	assert_true(WAIT_FOR(read_int(&t[1], &t[1].echoes) == 1, 5000));
	sleep_ms(200);
	peer_fakenet_cut(net, 0, 1, true);
	bg_join(&c);
	assert_int_equal(c.rc, -ECONNRESET);
	peer_fakenet_cut(net, 0, 1, false);
	peer_fakenet_delay(net, 0, 2);

	/*
	 * The link dies while a bulk is received into the module's buffer
	 * (the module cuts it from bulk_dest): deliver() is still called,
	 * once, with -ECONNRESET and the module's cookie.
	 */
	for (i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13);
	{
		struct peer_frame f = {
			.type = T_BULK, .bulk = data, .bulk_len = sizeof(data),
			.bulk_crc = ers_crc32c(0, data, sizeof(data)),
		};

		t[1].cut_in_bulk_dest = true;
		t[1].cut_peer = 0;
		assert_int_equal(peer_send(t[0].x, 1, &f, 1000), 0);
		assert_true(WAIT_FOR(read_int(&t[1], &t[1].bulk_reset) == 1,
				     5000));
		assert_int_equal(read_int(&t[1], &t[1].bulk_dests), 1);
		assert_int_equal(read_int(&t[1], &t[1].bulk_ok), 0);
		peer_fakenet_cut(net, 0, 1, false);
		t[1].cut_in_bulk_dest = false;
		assert_int_equal(peer_send(t[0].x, 1, &f, 1000), 0);
		assert_true(WAIT_FOR(read_int(&t[1], &t[1].bulk_ok) == 1,
				     5000));
		assert_int_equal(read_int(&t[1], &t[1].bulk_dests), 2);
		assert_int_equal(read_int(&t[1], &t[1].bulk_reset), 1);
		assert_int_equal(read_int(&t[1], &t[1].bulk_bad_cookie), 0);
		assert_memory_equal(t[1].bulk_buf, data, sizeof(data));
	}
	node_free(&t[0]);
	node_free(&t[1]);
	peer_fakenet_free(net);
}

/*
 * A link's end heard late, once a call has made a new link: only calls
 * sent on the old link fail; the new one's call gets its answer.
 */
static void test_late_down(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(2, 13);
	struct tnode t[2];
	uint8_t buf[256];
	struct bg_call c;

	(void)state;
	peer_fakenet_delay(net, 0, 1);
	node_make(net, &t[0], 0, 1);
	node_make(net, &t[1], 1, 2);
	assert_int_equal(send_seq(&t[0], 1, 1, 1000), 0);
	assert_true(WAIT_FOR(got(&t[1], 0) == 1, 5000));

	/* Node 0's endpoint is kept busy in a delivery... */
	pthread_mutex_lock(&t[0].lock);
	t[0].hold_seq = true;
	pthread_mutex_unlock(&t[0].lock);
	assert_int_equal(send_seq(&t[1], 0, 1, 1000), 0);
	assert_true(WAIT_FOR(read_bool(&t[0], &t[0].held), 5000));
	/* ...while the link breaks: its end waits in node 0's inbox. */
	peer_fakenet_cut(net, 0, 1, true);
	peer_fakenet_cut(net, 0, 1, false);
	/* A call makes a new link and is answered on it. */
	c = (struct bg_call){ .t = &t[0], .to = 1, .type = T_ECHO,
			      .len = sizeof(buf), .buf = buf,
			      .cap = sizeof(buf), .timeout_ms = 10000 };
	bg_start(&c);
	assert_true(WAIT_FOR(read_int(&t[1], &t[1].echoes) == 1, 5000));
	/* Node 0 hears of the old link's end only now, then the answer. */
	pthread_mutex_lock(&t[0].lock);
	t[0].hold_seq = false;
	pthread_mutex_unlock(&t[0].lock);
	bg_join(&c);
	assert_int_equal(c.rc, 0);
	assert_int_equal(buf[7], pattern_byte(9, 7));
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].downs[1]) == 1, 5000));

	/* A call on the old link still fails when its end is heard. */
	c = (struct bg_call){ .t = &t[0], .to = 1, .type = T_SILENT,
			      .timeout_ms = 20000 };
	bg_start(&c);
	assert_true(WAIT_FOR(read_int(&t[1], &t[1].silents) == 1, 5000));
	peer_fakenet_cut(net, 0, 1, true);
	bg_join(&c);
	assert_int_equal(c.rc, -ECONNRESET);
	node_free(&t[0]);
	node_free(&t[1]);
	peer_fakenet_free(net);
}

/* A partition cuts exactly the links across it; a heal lets them up. */
static void test_partition(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(4, 3);
	const int side[4] = { 0, 0, 1, 1 };
	struct tnode t[4];
	uint64_t seq[4][4] = { { 0 } }, t0;
	int a, b;

	(void)state;
	peer_fakenet_delay(net, 0, 5);
	for (a = 0; a < 4; a++)
		node_make(net, &t[a], a, 10 + (uint64_t)a);
	for (a = 0; a < 4; a++)
		for (b = 0; b < 4; b++)
			if (a != b)
				assert_int_equal(
					send_seq(&t[a], b, ++seq[a][b], 1000),
					0);
	for (a = 0; a < 4; a++)
		for (b = 0; b < 4; b++)
			if (a != b)
				assert_true(WAIT_FOR(
					read_bool(&t[a], &t[a].link_up[b]),
					5000));

	peer_fakenet_partition(net, side);
	for (a = 0; a < 4; a++)
		for (b = 0; b < 4; b++) {
			if (a == b)
				continue;
			/* Down across, still up within a side. */
			assert_true(WAIT_FOR(
				read_bool(&t[a], &t[a].link_up[b]) ==
					(side[a] == side[b]),
				5000));
			assert_int_equal(read_int(&t[a], &t[a].downs[b]),
					 side[a] != side[b]);
		}
	t0 = now_ms();
	assert_int_equal(send_seq(&t[0], 2, ++seq[0][2], 100), -ENOTCONN);
	assert_true(now_ms() - t0 >= 90);
	assert_int_equal(send_seq(&t[3], 1, ++seq[3][1], 0), -ENOTCONN);
	assert_int_equal(send_seq(&t[0], 1, ++seq[0][1], 100), 0);
	assert_int_equal(send_seq(&t[3], 2, ++seq[3][2], 100), 0);
	assert_true(WAIT_FOR(got(&t[1], 0) == 2 && got(&t[2], 3) == 2, 5000));

	/* A send waiting on a black hole goes through when it heals. */
	{
		struct bg_send bs = { .t = &t[1], .to = 3,
				      .seq = ++seq[1][3], .timeout_ms = 20000 };

		t0 = now_ms();
		bg_send_start(&bs);
		sleep_ms(100);
		peer_fakenet_heal(net);
		assert_int_equal(pthread_join(bs.th, NULL), 0);
		assert_int_equal(bs.rc, 0);
		assert_true(now_ms() - t0 < 10000);
	}
	for (a = 0; a < 4; a++)
		for (b = 0; b < 4; b++)
			if (a != b)
				assert_int_equal(
					send_seq(&t[a], b, ++seq[a][b], 1000),
					0);
	for (a = 0; a < 4; a++)
		for (b = 0; b < 4; b++) {
			if (a == b)
				continue;
			assert_true(
				WAIT_FOR(last(&t[b], a) == seq[a][b], 5000));
			assert_true(WAIT_FOR(
				read_bool(&t[a], &t[a].link_up[b]), 5000));
			assert_int_equal(read_int(&t[a], &t[a].ups[b]),
					 1 + (side[a] != side[b]));
		}
	for (a = 0; a < 4; a++)
		assert_int_equal(read_int(&t[a], &t[a].order_errors), 0);
	for (a = 0; a < 4; a++)
		node_free(&t[a]);
	peer_fakenet_free(net);
}

/* A frozen node hears nothing and sends nothing until it thaws. */
static void test_freeze(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(3, 5);
	struct tnode t[3];
	uint64_t t0;
	int i;

	(void)state;
	peer_fakenet_delay(net, 0, 3);
	for (i = 0; i < 3; i++)
		node_make(net, &t[i], i, 20 + (uint64_t)i);
	assert_int_equal(send_seq(&t[0], 1, 1, 1000), 0);
	assert_int_equal(send_seq(&t[1], 0, 1, 1000), 0);
	assert_true(WAIT_FOR(got(&t[1], 0) == 1 && got(&t[0], 1) == 1, 5000));

	peer_fakenet_freeze(net, 1, true);
	/* The link is up: the frames are taken, and wait. */
	for (i = 2; i <= 11; i++)
		assert_int_equal(send_seq(&t[0], 1, (uint64_t)i, 100), 0);
	/* Its own sends wait for the thaw, then time out. */
	t0 = now_ms();
	assert_int_equal(send_seq(&t[1], 0, 2, 100), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 90);
	/* A new link needs its handshake: no answer while frozen. */
	assert_int_equal(send_seq(&t[2], 1, 1, 100), -ETIMEDOUT);
	sleep_ms(100);
	assert_int_equal(got(&t[1], 0), 1);
	assert_int_equal(got(&t[0], 1), 1);

	/* Thawed: what waited arrives, in order; it talks again. */
	peer_fakenet_freeze(net, 1, false);
	assert_true(WAIT_FOR(got(&t[1], 0) == 11, 5000));
	assert_int_equal(last(&t[1], 0), 11);
	assert_int_equal(send_seq(&t[1], 0, 3, 1000), 0);
	assert_int_equal(send_seq(&t[2], 1, 2, 1000), 0);
	assert_true(WAIT_FOR(last(&t[0], 1) == 3 && last(&t[2 - 1], 2) == 2,
			     5000));
	assert_int_equal(read_int(&t[1], &t[1].order_errors), 0);
	assert_int_equal(read_int(&t[0], &t[0].order_errors), 0);

	/* A send blocked by the freeze goes through at the thaw. */
	peer_fakenet_freeze(net, 1, true);
	{
		struct bg_send bs = { .t = &t[1], .to = 2, .seq = 4,
				      .timeout_ms = 20000 };

		bg_send_start(&bs);
		sleep_ms(50);
		peer_fakenet_freeze(net, 1, false);
		assert_int_equal(pthread_join(bs.th, NULL), 0);
		assert_int_equal(bs.rc, 0);
		assert_true(WAIT_FOR(last(&t[2], 1) == 4, 5000));
	}
	for (i = 0; i < 3; i++)
		node_free(&t[i]);
	peer_fakenet_free(net);
}

/* Random drops lose frames and break links; never reorder or duplicate. */
static void test_drop(void **state)
{
	uint64_t seed = seed_from_env("PEER_FAKE_SEED", 1);
	struct peer_fakenet *net = peer_fakenet_new(2, seed);
	struct tnode t[2];
	const int n = 1000;
	int i, downs, ups;
	uint64_t g;

	(void)state;
	peer_fakenet_delay(net, 0, 2);
	node_make(net, &t[0], 0, 1);
	node_make(net, &t[1], 1, 2);
	peer_fakenet_drop(net, 0.05);
	for (i = 1; i <= n; i++) {
		assert_int_equal(send_seq(&t[0], 1, (uint64_t)i, 1000), 0);
		/* Paced, so that a break loses few frames in flight. */
		if (i % 4 == 0)
			sleep_ms(1);
	}
	peer_fakenet_drop(net, 0);
	assert_int_equal(send_seq(&t[0], 1, (uint64_t)n + 1, 1000), 0);
	assert_true(WAIT_FOR(last(&t[1], 0) == (uint64_t)n + 1, 5000));
	g = got(&t[1], 0);
	downs = read_int(&t[1], &t[1].downs[0]);
	ups = read_int(&t[1], &t[1].ups[0]);
	print_message("drop: %" PRIu64 " of %d frames arrived, %d link "
		      "breaks\n", g, n + 1, downs);
	assert_int_equal(read_int(&t[1], &t[1].order_errors), 0);
	/* p = 0.05 over 1000 frames: 50 expected; far from 0 or 300. */
	assert_true(downs >= 10 && downs <= 150);
	assert_true((uint64_t)(n + 1) - g >= (uint64_t)downs);
	assert_int_equal(ups, downs + 1);
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].downs[1]) == downs, 5000));
	node_free(&t[0]);
	node_free(&t[1]);
	peer_fakenet_free(net);
}

/* A node replaced by a new daemon: the next link carries the new one. */
static void test_replace(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(2, 9);
	struct peer_xport *dup;
	struct peer_stats st;
	struct tnode t[2];

	(void)state;
	node_make(net, &t[0], 0, 1);
	node_make(net, &t[1], 1, 50);
	assert_int_equal(peer_fake_new(net, 1, 99, &dup), -EEXIST);
	assert_int_equal(send_seq(&t[0], 1, 1, 1000), 0);
	assert_true(WAIT_FOR(got(&t[1], 0) == 1, 5000));
	/* Each side hears of the link on its own thread. */
	assert_true(WAIT_FOR(read_u64(&t[0], &t[0].up_inc[1]) == 50, 5000));

	node_free(&t[1]);
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].downs[1]) == 1, 5000));
	assert_int_equal(send_seq(&t[0], 1, 2, 100), -ENOTCONN);
	node_make(net, &t[1], 1, 51);
	assert_int_equal(send_seq(&t[0], 1, 3, 1000), 0);
	assert_true(WAIT_FOR(got(&t[1], 0) == 1, 5000));
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].ups[1]) == 2, 5000));
	assert_int_equal(read_u64(&t[0], &t[0].up_inc[1]), 51);
	assert_int_equal(read_u64(&t[1], &t[1].up_inc[0]), 1);
	peer_stats(t[0].x, 1, &st);
	assert_int_equal(st.incarnation, 51);
	assert_int_equal(st.connects, 2);

	/* set_addr is recorded per peer. */
	{
		char buf[64];

		assert_int_equal(peer_fake_addr(t[0].x, 1, buf, sizeof(buf)),
				 0);
		assert_string_equal(buf, "");
		assert_int_equal(peer_set_addr(t[0].x, 1, "10.0.0.2:7070"), 0);
		assert_int_equal(peer_fake_addr(t[0].x, 1, buf, sizeof(buf)),
				 0);
		assert_string_equal(buf, "10.0.0.2:7070");
		assert_int_equal(peer_fake_addr(t[0].x, 1, buf, 4),
				 -ENAMETOOLONG);
	}
	node_free(&t[0]);
	node_free(&t[1]);
	peer_fakenet_free(net);
}

/* A frame a module refuses, or no module takes, closes the link. */
static void test_refused(void **state)
{
	struct peer_fakenet *net = peer_fakenet_new(2, 13);
	struct peer_frame bad = { .type = T_BAD };
	struct peer_frame unknown = { .type = PEER_T_DATA_FIRST };
	struct peer_stats st;
	struct tnode t[2];

	(void)state;
	node_make(net, &t[0], 0, 1);
	node_make(net, &t[1], 1, 2);
	assert_int_equal(peer_send(t[0].x, 1, &bad, 1000), 0);
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].downs[1]) == 1, 5000));
	peer_stats(t[1].x, 0, &st);
	assert_int_equal(st.bad_frames, 1);
	assert_true(WAIT_FOR((peer_stats(t[1].x, 0, &st), !st.up), 5000));

	assert_int_equal(peer_send(t[0].x, 1, &unknown, 1000), 0);
	assert_true(WAIT_FOR(read_int(&t[0], &t[0].downs[1]) == 2, 5000));
	peer_stats(t[1].x, 0, &st);
	assert_int_equal(st.unknown_type, 1);
	assert_int_equal(st.bad_frames, 2);
	/* And the link comes back for good frames. */
	assert_int_equal(send_seq(&t[0], 1, 1, 1000), 0);
	assert_true(WAIT_FOR(got(&t[1], 0) == 1, 5000));
	node_free(&t[0]);
	node_free(&t[1]);
	peer_fakenet_free(net);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * A random schedule of sends, cuts, heals, freezes, drops and replaced
 * endpoints.  Whatever happens, no frame arrives twice or out of order;
 * once everything is healed every pair talks again.
 */
static void test_random(void **state)
{
	uint64_t seed = seed_from_env("PEER_FAKE_SEED", 1), r = seed;
	enum { N = 4, STEPS = 600 };
	struct peer_fakenet *net = peer_fakenet_new(N, seed);
	struct tnode *t = calloc(N, sizeof(*t));
	uint64_t seq[N][N] = { { 0 } }, inc = 100;
	int i, a, b, op, sent = 0, ok = 0;

	(void)state;
	assert_non_null(t);
	print_message("random schedule: PEER_FAKE_SEED=%" PRIu64 "\n", seed);
	peer_fakenet_delay(net, 0, 8);
	for (i = 0; i < N; i++)
		node_make(net, &t[i], i, inc++);
	for (i = 0; i < STEPS; i++) {
		a = (int)(splitmix(&r) % N);
		b = (int)(splitmix(&r) % (N - 1));
		b += b >= a;
		op = (int)(splitmix(&r) % 100);
		if (op < 70) {
			sent++;
			ok += send_seq(&t[a], b, ++seq[a][b], 5) == 0;
		} else if (op < 76) {
			peer_fakenet_cut(net, a, b, true);
		} else if (op < 84) {
			peer_fakenet_cut(net, a, b, false);
		} else if (op < 86) {
			peer_fakenet_heal(net);
		} else if (op < 90) {
			peer_fakenet_freeze(net, a, splitmix(&r) % 2);
		} else if (op < 94) {
			peer_fakenet_drop(net, splitmix(&r) % 2 ? 0.05 : 0);
		} else if (op < 96) {
			/* A replacement: the sequence starts afresh. */
			assert_int_equal(read_int(&t[a], &t[a].order_errors),
					 0);
			node_free(&t[a]);
			node_make(net, &t[a], a, inc++);
			for (b = 0; b < N; b++)
				seq[b][a] = 0;
		} else {
			sleep_ms((int)(splitmix(&r) % 10));
		}
	}
	print_message("random schedule: %d of %d sends taken\n", ok, sent);
	peer_fakenet_drop(net, 0);
	peer_fakenet_heal(net);
	for (i = 0; i < N; i++)
		peer_fakenet_freeze(net, i, false);
	for (a = 0; a < N; a++)
		for (b = 0; b < N; b++)
			if (a != b)
				assert_int_equal(send_seq(&t[a], b,
							  ++seq[a][b], 5000),
						 0);
	for (a = 0; a < N; a++)
		for (b = 0; b < N; b++)
			if (a != b)
				assert_true(WAIT_FOR(last(&t[b], a) ==
							     seq[a][b],
						     10000));
	for (i = 0; i < N; i++) {
		assert_int_equal(read_int(&t[i], &t[i].order_errors), 0);
		node_free(&t[i]);
	}
	peer_fakenet_free(net);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_calls),
		cmocka_unit_test(test_cut_during_call),
		cmocka_unit_test(test_late_down),
		cmocka_unit_test(test_partition),
		cmocka_unit_test(test_freeze),
		cmocka_unit_test(test_drop),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_random),
	};

	printf("PEER_FAKE_SEED=%" PRIu64 "\n",
	       seed_from_env("PEER_FAKE_SEED", 1));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
